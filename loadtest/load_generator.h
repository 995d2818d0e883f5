#pragma once

// The load generators RunLoad (load_runner.cc) drives, one per level (see load_runner.h):
//   closed loop  MakeClosedLoop: N requests always outstanding (kSync threads, kAsync callback
//                chains, or one kStream stream with N requests in flight)
//   open loop    MakeOpenLoop: one scheduler thread sends at a target rate through kAsync or
//                kStream, whatever the answers, with at most max_outstanding in flight
// and what they share: the run's request budget, and the context every generator borrows.
// Internal to sluice_loadtest.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/inference_client.h"
#include "loadtest/load_runner.h"
#include "loadtest/window_collector.h"

namespace sluice::loadtest {

// The run's request allowance, shared by every sender. Lock-free.
class RequestBudget {
 public:
  explicit RequestBudget(int64_t requests) : remaining_(requests) {}
  // Takes one request from the budget; false once it is spent.
  bool TryTake() { return remaining_.fetch_sub(1, std::memory_order_relaxed) > 0; }
  bool exhausted() const { return remaining_.load(std::memory_order_relaxed) <= 0; }

 private:
  std::atomic<int64_t> remaining_;
};

// A load generator for one level. Start() begins sending; StopAndDrain() stops sending and waits
// (bounded) until every request it sent has been answered, failed or been cancelled, and
// recorded. Both are called from the measurement thread, once each, in that order; the
// destructor requires StopAndDrain() to have returned if Start() was called.
class LoadGenerator {
 public:
  virtual ~LoadGenerator() = default;
  virtual void Start() = 0;
  virtual void StopAndDrain(std::chrono::milliseconds timeout) = 0;
};

// Everything a generator borrows; all outlive it.
struct GeneratorContext {
  client::InferenceClient* client;
  OutgoingRequest request;
  WindowCollector* collector;
  RequestBudget* budget;
  // RunOptions::make_sync_sender; null or empty: gRPC.
  const std::function<absl::StatusOr<std::function<absl::Status()>>()>* make_sync_sender = nullptr;
  // RunOptions::request_source; null or empty: none.
  const std::function<OutgoingRequest(uint64_t)>* source = nullptr;
  // RunOptions::request_variants; null or empty: always `request`.
  const std::vector<std::shared_ptr<const inference::ModelInferRequest>>* variants = nullptr;
  uint64_t seed = 0;
  // The number of the next send, across the run's levels and threads.
  std::atomic<uint64_t>* next_send = nullptr;

  // The request to send next: `request`, or the source's or a variant chosen by the send's
  // number.
  OutgoingRequest Pick() const;
};

// Closed loop at `concurrency`: LoadMode::kSync threads, kAsync chains of AsyncInfer, or one
// kStream stream with `concurrency` requests in flight.
std::unique_ptr<LoadGenerator> MakeClosedLoop(GeneratorContext context, LoadMode mode,
                                              int64_t concurrency);

// Open loop at `rate` per second (constant gaps, or exponential gaps for Poisson arrivals drawn
// from `seed`) through AsyncInfer (kAsync) or a stream (kStream), with at most `max_outstanding`
// requests in flight.
std::unique_ptr<LoadGenerator> MakeOpenLoop(GeneratorContext context, LoadMode mode, double rate,
                                            ArrivalProcess arrivals, uint64_t seed,
                                            int64_t max_outstanding);

}  // namespace sluice::loadtest
