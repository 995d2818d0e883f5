#pragma once

// CpuExecutor: the CPU backend's executor for one model instance, a SlotBackend on the shared
// SlotPipeline (engine/core/slot_pipeline.h). The pipeline's issue thread gathers a batch's inputs
// into the slot's staging buffers and runs the model (Issue); its completion thread checks and
// slices the outputs into the responses (Scatter), answers them and frees the slot, so batch k's
// answers go out while batch k+1 computes (the same pipeline the CUDA executor runs with a stream
// and events). When nothing overlaps (no other batch taken), the issue thread answers the batch
// itself (SlotPipelineOptions::answer_on_issue_thread_when_idle): one hand-off fewer at low load.
// With CpuExecutorOptions::run_on_caller (the engine's choice for a model with one CPU instance)
// there are no threads at all: Execute() gathers, runs, scatters and answers the batch on its
// caller, the scheduler's batcher thread (SlotPipelineOptions::answer_on_caller).
//
// Faults follow the pipeline's one order: a batch whose model run fails with INTERNAL (the
// ModelInstance contract's "fault of the backend"), whose outputs do not match the config, or
// whose before_batch_for_test hook fails, faults the executor: that batch's requests are failed
// INTERNAL, batches already taken behind it are failed INTERNAL without running, HasFreeSlot() is
// false from then on, and ExecutorOptions::on_fault is called once (on the completion thread).
// Other errors (e.g. INVALID_ARGUMENT from a backend) fail only their batch.
//
// Inputs in device memory (TensorView::device: a CUDA shared-memory region, on a GPU build whose
// model runs on the CPU backend) are copied device to host by Issue, on the issue thread, into
// the slot's staging, synchronously there (the model runs next on that thread anyway); never on
// the RPC thread that submitted them.

#include <atomic>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"
#include "engine/core/executor.h"
#include "engine/core/slot_pipeline.h"

namespace sluice::engine::cpu {

struct CpuExecutorOptions {
  // Execute() runs and answers the batch on the caller's thread (ExecuteRunsBatch()) instead of
  // queueing it for the executor's own two threads, which are then not started. For a model with
  // one instance: its batches run one at a time on the scheduler's batcher thread, which saves
  // two thread hand-offs per batch (batcher -> issue thread -> completion thread) and gives up
  // only the overlap of answering batch k with computing batch k+1 on the same instance.
  bool run_on_caller = false;
};

// Thread-safety: as Executor. The SlotBackend half runs on the pipeline's threads: Issue on its
// issue thread (the stand-in for a CUDA stream), Wait and Scatter on its completion thread (all
// three on the caller of Execute() with run_on_caller).
class CpuExecutor final : public Executor, private SlotBackend {
 public:
  // Starts the two threads (none with run_on_caller). `instance` is owned; `model_config` is
  // borrowed and must outlive the executor.
  static absl::StatusOr<std::unique_ptr<CpuExecutor>> Create(
      const ModelConfig& model_config, std::unique_ptr<ModelInstance> instance,
      ExecutorOptions options, CpuExecutorOptions cpu_options = {});
  ~CpuExecutor() override;

  bool HasFreeSlot() const override { return pipeline_->HasFreeSlot(); }
  void Execute(Batch batch) override { pipeline_->Execute(std::move(batch)); }
  // Execute() only queues the batch for the pipeline's issue thread (a lock, a push, a signal);
  // not with run_on_caller, where it runs the batch (ExecuteRunsBatch()).
  bool ExecuteOnlyEnqueues() const override { return pipeline_->ExecuteOnlyEnqueues(); }
  bool ExecuteRunsBatch() const override { return pipeline_->ExecuteRunsBatch(); }
  int InFlight() const override { return pipeline_->InFlight(); }
  void Stop() override { pipeline_->Stop(); }
  // The items counter of the executor thread (an atomic load; never waits).
  uint64_t ReadItemCounter() override;
  uint64_t ReadTokenCounter() override { return tokens_run_.load(std::memory_order_relaxed); }

 private:
  // One batch in flight. Written by Issue, read by Scatter: the pipeline hands slot s to one
  // batch at a time, so no lock.
  struct Slot {
    // One staging buffer per model input, reused batch after batch (the pinned buffers of the
    // CUDA executor play this part).
    std::vector<std::vector<std::byte>> input_staging;
    std::vector<Tensor> outputs;
    // Ragged models (ModelInstance::runs_ragged): each request's own outputs, in config order.
    std::vector<std::vector<Tensor>> per_request;
    std::chrono::nanoseconds input_time{0};
    std::chrono::nanoseconds infer_time{0};
  };

  CpuExecutor(const ModelConfig& model_config, std::unique_ptr<ModelInstance> instance,
              int slot_count);

  // SlotBackend: Issue gathers and runs the model (on the pipeline's issue thread); Wait has
  // nothing to wait for; Scatter checks the outputs against the config and slices them.
  absl::Status Issue(int s, const Batch& batch) override;
  absl::Status Wait(int s) override;
  absl::Status Scatter(int s, const Batch& batch, SlotAnswers& answers) override;

  // Gathers the batch's inputs into views (zero-copy for a batch of one request whose inputs are
  // in host memory). Inputs in device memory are copied into the slot's staging, on this (the
  // issue) thread: the errors are CopyFromDevice's.
  absl::StatusOr<std::vector<TensorView>> Gather(const Batch& batch, Slot& slot);
  // Copies device-memory input `input` to `out` and waits for it. INTERNAL (a fault, marked
  // process-fatal) when the CUDA context is lost; FailedPrecondition (this batch fails, the
  // executor stays healthy) for any other copy error.
  absl::Status CopyFromDevice(const TensorView& input, std::span<std::byte> out);
  // Scatter for ragged models (sequence models, the encoder): no gather before, no slicing after;
  // checks each request's own outputs and hands them over.
  absl::Status ScatterRagged(Slot& slot, const Batch& batch, SlotAnswers& answers);

  const ModelConfig& config_;
  const std::unique_ptr<ModelInstance> instance_;
  std::vector<Slot> slots_;
  // Items run, counted by Issue once per batch (the CPU stand-in for the CUDA executor's device
  // counters); read by the stats collector.
  std::atomic<uint64_t> items_run_{0};
  std::atomic<uint64_t> tokens_run_{0};
  // Last member: destroyed (stopped, its threads joined) before what its threads use.
  std::unique_ptr<SlotPipeline> pipeline_;
};

}  // namespace sluice::engine::cpu
