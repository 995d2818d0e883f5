#pragma once

// CpuExecutor: the CPU backend's executor for one model instance. Its executor thread gathers a
// batch's inputs into the slot's staging buffers and runs the model; its completion thread
// scatters outputs into the responses, answers them and frees the slot, so batch k's answers go
// out while batch k+1 computes (the same pipeline the CUDA executor runs with a stream and events).
//
// Faults: a batch whose model run fails with INTERNAL (the ModelInstance contract's "fault of the
// backend"), whose outputs do not match the config, or whose before_batch_for_test hook fails,
// faults the executor: that batch's requests are failed INTERNAL, batches already taken behind it
// are failed INTERNAL without running, HasFreeSlot() is false from then on, and
// ExecutorOptions::on_fault is called once (on the completion thread). Other errors (e.g.
// INVALID_ARGUMENT from a backend) fail only their batch.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/executor.h"
#include "engine/model_stats.h"

namespace sluice::engine::cpu {

class CpuExecutor final : public Executor {
 public:
  // Starts the two threads. `instance` is owned; `model_config` is borrowed and must outlive the
  // executor.
  static absl::StatusOr<std::unique_ptr<CpuExecutor>> Create(
      const ModelConfig& model_config, std::unique_ptr<ModelInstance> instance,
      ExecutorOptions options);
  ~CpuExecutor() override;

  bool HasFreeSlot() const override;
  void Execute(Batch batch) override;
  int InFlight() const override;
  void Stop() override;
  // The items counter of the executor thread (an atomic load; never waits).
  uint64_t ReadItemCounter() override;

 private:
  // Starts the executor and completion threads; ResourceExhausted if one cannot start (the
  // destructor then joins the one that did).
  absl::Status StartThreads();

  struct Slot {
    // One staging buffer per model input, reused batch after batch (the pinned buffers of the
    // CUDA executor play this part).
    std::vector<std::vector<std::byte>> input_staging;
  };
  struct Work {
    Batch batch;
    int slot = -1;
    absl::StatusOr<std::vector<Tensor>> outputs = std::vector<Tensor>{};
    // Ragged models (ModelInstance::runs_ragged): each request's own outputs, config order; then
    // `outputs` only carries the status.
    std::vector<std::vector<Tensor>> per_request;
    std::chrono::nanoseconds input_time{0};
    std::chrono::nanoseconds infer_time{0};
    // This batch faulted the executor (the first fault): on_fault follows its answers.
    bool faulted = false;
  };

  CpuExecutor(const ModelConfig& model_config, std::unique_ptr<ModelInstance> instance,
              ExecutorOptions options);

  void ExecutorLoop();
  void CompletionLoop();
  // Gathers the batch's inputs into views (zero-copy for a batch of one request).
  absl::StatusOr<std::vector<TensorView>> Gather(const Batch& batch, Slot& slot);
  // Runs a ragged model's batch: no gather, each request's inputs as they are.
  void RunRagged(Work& work);
  // Answers the batch; returns the fault it found (malformed outputs), OK otherwise.
  absl::Status Finish(Work& work);
  // Finish's part for ragged models: checks and hands each request its own outputs.
  absl::Status FinishRagged(Work& work, std::vector<InferenceResponse>& responses);
  // Records the executor's first fault; returns whether `fault` was the first. Takes mu_.
  bool MarkFaulted(const absl::Status& fault);

  const ModelConfig& config_;
  const std::unique_ptr<ModelInstance> instance_;
  const ExecutorOptions options_;
  std::vector<Slot> slots_;

  mutable std::mutex mu_;
  std::condition_variable exec_cv_;
  std::condition_variable completion_cv_;
  std::vector<int> free_slots_;        // guarded by mu_
  std::deque<Work> exec_queue_;        // guarded by mu_
  std::deque<Work> completion_queue_;  // guarded by mu_
  int in_flight_ = 0;                  // guarded by mu_
  bool stopping_ = false;              // guarded by mu_
  bool exec_done_ = false;             // guarded by mu_
  // The first fault (OK while healthy); once set, no batch runs and no slot is offered.
  absl::Status fault_;  // guarded by mu_

  // Items run, counted by the executor thread once per batch (the CPU stand-in for the CUDA
  // executor's device counters); read by the stats collector.
  std::atomic<uint64_t> items_run_{0};
  // Per-request timings of the batch being finished; completion thread only, reused so that
  // recording a batch allocates nothing.
  std::vector<RequestTiming> timings_;

  std::mutex stop_mu_;  // serializes Stop(): one caller joins, the others wait
  std::thread exec_thread_;
  std::thread completion_thread_;
};

}  // namespace sluice::engine::cpu
