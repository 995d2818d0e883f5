#pragma once

// CudaExecutor: the CUDA backend's executor for one model instance on one GPU (ARCHITECTURE §2).
//
// Per instance: three streams (host-to-device copies, compute, device-to-host copies, so that
// batch k+1's input copy overlaps batch k's compute and batch k-1's output copy), a stats stream
// for the collector, device-resident counters, and a fixed pool of slots. A slot is one batch in
// flight: pinned input/output staging, device input/output buffers, six timing events, and, with
// graphs on, one captured CUDA graph per batch bucket (the graph bakes in the slot's pointers).
//
// A SlotBackend on the shared SlotPipeline (engine/core/slot_pipeline.h), with issue_thread =
// false. Per batch, Issue runs on the caller's (batcher) thread and never waits for the device:
// gather the requests' inputs into the slot's pinned staging (padded with zero rows up to the
// bucket), one H2D copy (a batch with inputs in device memory, from CUDA shared-memory regions: H2D
// copies of its host ranges and device-to-device copies of the others, all on the input stream, in
// place of that one copy), [compute stream waits] the bucket's graph (or the model's kernels), the
// counter kernel, [D2H stream waits] one D2H copy. The pipeline's completion thread calls Wait (the
// slot's last event, cudaEventSynchronize: the only wait) and Scatter (the three phase timings from
// the events, outputs into the responses) in FIFO order, answers and frees the slot; a slot's
// buffers are reused only after that.
//
// Faults follow the pipeline's one order: a failed CUDA call in a batch fails that batch's
// requests with INTERNAL naming the call, marks the executor unhealthy (HasFreeSlot() false; a
// batch taken after that fails at once without touching the device) and calls
// ExecutorOptions::on_fault once, from the completion thread.
//
// Thread-safety: as Executor. ReadItemCounter()/ReadCounters() from one thread at a time (the
// stats collector).

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "engine/core/executor.h"
#include "engine/core/model_stats.h"
#include "engine/core/slot_pipeline.h"
#include "engine/cuda/cuda_handles.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/kernels/device_counters.cuh"

namespace sluice::engine::cuda {

struct CudaExecutorOptions {
  // slot_count (batches in flight), on_slot_freed, on_fault and stats, as for every executor.
  ExecutorOptions executor;
  // The GPU this instance runs on.
  int device = 0;
  // Capture one CUDA graph per (slot, bucket) at load and replay it; false: plain launches.
  bool use_graphs = true;
};

// The batch sizes a model runs at on the GPU, ascending: its preferred_batch_size list plus
// max_batch_size, else 1, 2, 4, ... up to max_batch_size (max_batch_size itself last); {1} for a
// model without a batch dimension. A batch runs padded to the smallest bucket that holds it.
std::vector<int> BatchBuckets(const ModelConfig& config);

class CudaExecutor final : public Executor, private SlotBackend {
 public:
  // Allocates the streams, counters and slots, warms up every (slot, bucket) with zeros, captures
  // the graphs (if on) and replays each once, runs every (slot, bucket) once more through the
  // whole batch sequence (copies, graph or kernels, counter kernel, events, the blocking wait),
  // zeroes the counters, then starts the completion thread: when Create returns, every kernel and
  // copy a batch uses has run (lazy module loading cannot defer one to the first real batch).
  // `model_config` is borrowed and must outlive the executor. InvalidArgument for bad options or
  // more buckets than DeviceCounters::kMaxBuckets; Unimplemented for tensors the GPU does not run;
  // INTERNAL / RESOURCE_EXHAUSTED for CUDA errors.
  static absl::StatusOr<std::unique_ptr<CudaExecutor>> Create(
      const ModelConfig& model_config, std::unique_ptr<CudaModelInstance> model,
      CudaExecutorOptions options);
  // The same for a ragged model (the encoder): its buckets are (sequences, tokens) pairs, a batch
  // is packed by the model into the slot's staging (one H2D copy), runs the smallest bucket's
  // graph that holds it, copies back only the outputs its requests want (their real rows) and is
  // scattered by the model, each request with its own shapes. The warm-up runs every (slot,
  // bucket) with an empty batch (zero sequences) through the whole sequence, as above.
  static absl::StatusOr<std::unique_ptr<CudaExecutor>> CreateRagged(
      const ModelConfig& model_config, std::unique_ptr<CudaRaggedModel> model,
      CudaExecutorOptions options);
  ~CudaExecutor() override;

  bool HasFreeSlot() const override { return pipeline_->HasFreeSlot(); }
  void Execute(Batch batch) override { pipeline_->Execute(std::move(batch)); }
  int InFlight() const override { return pipeline_->InFlight(); }
  void Stop() override { pipeline_->Stop(); }
  // Copies the device counters on the stats stream and waits for them; the last good value if
  // that fails.
  uint64_t ReadItemCounter() override;
  // The device's token counter as of the last ReadItemCounter()/ReadCounters() (ragged models).
  uint64_t ReadTokenCounter() override;

  // The whole device counter block (batches, items, per-bucket batches, non-finite outputs), read
  // as ReadItemCounter does. Collector thread (or tests) only.
  absl::StatusOr<DeviceCounters> ReadCounters();
  // The batch buckets: row counts; for a ragged model, each bucket's token capacity (its
  // (sequences, tokens) pairs: ragged_buckets()).
  const std::vector<int>& buckets() const { return buckets_; }
  std::vector<RaggedBucket> ragged_buckets() const {
    return ragged_ == nullptr ? std::vector<RaggedBucket>{} : ragged_->buckets();
  }
  // The ragged model's load summary (CudaRaggedModel::Summary); empty for other models.
  std::string ragged_summary() const { return ragged_ == nullptr ? "" : ragged_->Summary(); }
  // False once a CUDA call failed (the pipeline's fault latch).
  bool healthy() const { return pipeline_->fault().ok(); }
  // Test-only: the next batch's issue launches an invalid kernel, as a real launch error would.
  void InjectFaultForTest() { inject_fault_.store(true, std::memory_order_release); }

 private:
  // Where each tensor of a bucket lives in a slot's (pinned and device) buffers: tensors back to
  // back, each 256-byte aligned, so one copy moves a whole batch.
  struct BucketLayout {
    int rows = 0;
    std::vector<size_t> input_offsets;
    size_t input_bytes = 0;
    std::vector<size_t> output_offsets;
    size_t output_bytes = 0;
  };
  // One input copy into a slot's device input buffer, for a batch with inputs in device memory
  // (a batch whose inputs are all in host memory copies its staging block whole instead).
  struct InputCopy {
    // Where it lands, counted from the slot's input_device (and, for a host copy, where it comes
    // from in the slot's input_staging: the layouts are the same).
    size_t device_offset = 0;
    size_t bytes = 0;
    // Null: from the pinned staging. Else a device address (DeviceBytes::address()) on
    // `source_device`.
    const void* source = nullptr;
    int source_device = -1;
  };
  struct Slot {
    PinnedHostBuffer input_staging;
    PinnedHostBuffer output_staging;
    DeviceBuffer input_device;
    DeviceBuffer output_device;
    // input copy, compute, output copy: begin and end of each (timing events).
    std::vector<CudaEvent> events = {};
    // Per bucket, with graphs on.
    std::vector<std::optional<CudaGraphExec>> graphs = {};
    // The bucket of the batch in flight in this slot (set by Issue, read by Scatter).
    int bucket = -1;
    // Ragged models: the batch's packing (from Pack to Scatter) and the output ranges to copy.
    std::unique_ptr<RaggedBatchState> ragged_state = nullptr;
    std::vector<BlockRange> output_ranges = {};
    // The batch's input copies, in stream order, when one of its inputs is in device memory.
    std::vector<InputCopy> input_copies = {};
    // The keepalives of the device memory those copies read (DeviceBytes::keepalive), held from
    // Gather until Wait saw the batch finish; after a fault, until the destructor synchronized
    // the streams. The request's own reference may go earlier (a batch failed by a fault is
    // answered at once): this one keeps the mapping open under copies still queued.
    std::vector<std::shared_ptr<const void>> input_leases = {};
  };
  enum EventIndex { kInBegin, kInEnd, kComputeBegin, kComputeEnd, kOutBegin, kOutEnd, kEvents };

  CudaExecutor(const ModelConfig& config, std::unique_ptr<CudaModelInstance> model,
               std::unique_ptr<CudaRaggedModel> ragged, CudaExecutorOptions options,
               std::vector<int> buckets, CudaStream h2d, CudaStream compute, CudaStream d2h,
               CudaStream stats, DeviceBuffer counters, PinnedHostBuffer counters_host);
  // Create and CreateRagged: exactly one of `model` and `ragged` is set.
  static absl::StatusOr<std::unique_ptr<CudaExecutor>> CreateWith(
      const ModelConfig& model_config, std::unique_ptr<CudaModelInstance> model,
      std::unique_ptr<CudaRaggedModel> ragged, std::vector<int> buckets,
      CudaExecutorOptions options);

  absl::Status Initialize();
  absl::Status WarmUpSlot(int slot);
  // The model's kernels for `bucket` on the compute stream, reading and writing `slot`'s buffers.
  absl::Status EnqueueModel(int slot, int bucket);
  // Stages the batch's host inputs in the slot's pinned buffer and plans its input copies (with
  // the leases on device inputs) for EnqueueInputCopies.
  absl::Status Gather(const Batch& batch, int slot, int bucket);
  // Adds a host-to-device copy of [device_offset, + bytes) to the slot's plan, merged with the
  // previous one where they touch.
  void AddHostCopy(Slot& slot, size_t device_offset, size_t bytes);
  // The slot's input copies on the input stream: H2D from the staging, D2D (cudaMemcpyAsync) from
  // device inputs on this executor's GPU, cudaMemcpyPeerAsync from those on another GPU.
  absl::Status EnqueueInputCopies(int slot, int bucket);
  // The device half of Issue: copies, model, counters, events.
  absl::Status IssueOnStreams(int slot, int bucket, int items);

  // SlotBackend (engine/core/slot_pipeline.h).
  absl::Status Issue(int s, const Batch& batch) override;
  absl::Status IssueRagged(int s, const Batch& batch);
  absl::Status Wait(int s) override;
  absl::Status Scatter(int s, const Batch& batch, SlotAnswers& answers) override;

  const ModelConfig& config_;
  // Exactly one of these two.
  const std::unique_ptr<CudaModelInstance> model_;
  const std::unique_ptr<CudaRaggedModel> ragged_;
  const CudaExecutorOptions options_;
  const int device_;
  const std::vector<int> buckets_;
  std::vector<size_t> input_item_bytes_;
  std::vector<size_t> output_item_bytes_;
  std::vector<BucketLayout> layouts_;
  CudaStream h2d_stream_;
  CudaStream compute_stream_;
  CudaStream d2h_stream_;
  CudaStream stats_stream_;
  DeviceBuffer counters_;
  PinnedHostBuffer counters_host_;
  // Recorded after the counters' copy on the stats stream; ReadCounters waits on it (blocking).
  std::optional<CudaEvent> stats_done_;
  std::vector<Slot> slots_;

  std::atomic<bool> inject_fault_{false};
  common::Mutex counters_mu_;  // serializes counter reads (one pinned buffer)
  uint64_t last_items_ ABSL_GUARDED_BY(counters_mu_) = 0;
  uint64_t last_tokens_ ABSL_GUARDED_BY(counters_mu_) = 0;
  // Last member: destroyed (stopped, its thread joined) before the slots and streams it uses.
  std::unique_ptr<SlotPipeline> pipeline_;
};

}  // namespace sluice::engine::cuda
