#pragma once

// PreparationPool: the engine's bounded worker pool for request preparation that is too heavy for
// an RPC thread (ARCHITECTURE §8: validated on the RPC thread, prepared here, then enqueued with
// its token count). Today that is tokenization of text inputs (the encoder's `text`/`text_pair`):
// Engine::Submit validates a request, and if its model says it NeedsPreparation, hands it here;
// a worker runs Model::PrepareRequest and enqueues it into the model's scheduler.
//
// Bounded: at most `max_queue` jobs wait; TrySubmit refuses at once (RESOURCE_EXHAUSTED, with a
// message naming the limit) when they are all taken, never blocks. Its threads are owned and
// joined by Stop() (also by the destructor). Stop() runs every job still queued before it
// returns: preparation is bounded work, and every job ends by answering or enqueuing its request.
//
// Thread-safe.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace sluice::engine {

struct PreparationPoolOptions {
  // Worker threads (>= 1).
  int threads = 2;
  // Jobs waiting (not counting those running) at most (>= 1).
  int64_t max_queue = 1024;
};

class PreparationPool {
 public:
  using Job = std::function<void()>;

  // InvalidArgument for threads < 1 or max_queue < 1. Starts the threads.
  static absl::StatusOr<std::unique_ptr<PreparationPool>> Create(PreparationPoolOptions options);
  ~PreparationPool();  // Stop()s.
  PreparationPool(const PreparationPool&) = delete;
  PreparationPool& operator=(const PreparationPool&) = delete;

  // Queues `job` (moved from only on success). ResourceExhausted if max_queue jobs wait;
  // Unavailable after Stop().
  absl::Status TrySubmit(Job& job);
  // No job queued or running.
  bool Idle() const;
  // Refuses new jobs, runs the queued ones, joins the threads. Idempotent.
  void Stop();

  int threads() const { return options_.threads; }

 private:
  explicit PreparationPool(PreparationPoolOptions options);
  void Work();

  const PreparationPoolOptions options_;
  mutable common::Mutex mu_;
  common::CondVar cv_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // written by Create and Stop only
  common::Mutex stop_mu_;             // serialises Stop()
};

}  // namespace sluice::engine
