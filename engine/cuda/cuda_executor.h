#pragma once

// CudaExecutor: the CUDA backend's executor for one model instance on one GPU (ARCHITECTURE §2).
//
// Per instance: three streams (host-to-device copies, compute, device-to-host copies, so that
// batch k+1's input copy overlaps batch k's compute and batch k-1's output copy), a stats stream
// for the collector, device-resident counters, and a fixed pool of slots. A slot is one batch in
// flight: pinned input/output staging, device input/output buffers, six timing events, and, with
// graphs on, one captured CUDA graph per batch bucket (the graph bakes in the slot's pointers).
//
// Per batch, on the caller's (batcher) thread, which never waits for the device: gather the
// requests' inputs into the slot's pinned staging (padded with zero rows up to the bucket), one
// H2D copy, [compute stream waits] the bucket's graph (or the model's kernels), the counter
// kernel, [D2H stream waits] one D2H copy. The completion thread waits on the slots' last events
// in FIFO order (cudaEventSynchronize: the only wait), reads the three phase timings from the
// events, scatters outputs into the responses, answers them and frees the slot; a slot's buffers
// are reused only after that.
//
// Faults: a failed CUDA call in a batch fails that batch's requests with INTERNAL naming the call,
// marks the executor unhealthy (every later batch fails at once without touching the device) and
// calls ExecutorOptions::on_fault once, from the completion thread.
//
// Thread-safety: as Executor. ReadItemCounter()/ReadCounters() from one thread at a time (the
// stats collector).

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/cuda/cuda_handles.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/kernels/device_counters.cuh"
#include "engine/executor.h"
#include "engine/model_stats.h"

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

class CudaExecutor final : public Executor {
 public:
  // Allocates the streams, counters and slots, warms up every (slot, bucket) with zeros, captures
  // the graphs (if on) and replays each once, then starts the completion thread: when Create
  // returns, every bucket has run. `model_config` is borrowed and must outlive the executor.
  // InvalidArgument for bad options or more buckets than DeviceCounters::kMaxBuckets;
  // Unimplemented for tensors the GPU does not run; INTERNAL / RESOURCE_EXHAUSTED for CUDA errors.
  static absl::StatusOr<std::unique_ptr<CudaExecutor>> Create(
      const ModelConfig& model_config, std::unique_ptr<CudaModelInstance> model,
      CudaExecutorOptions options);
  ~CudaExecutor() override;

  bool HasFreeSlot() const override;
  void Execute(Batch batch) override;
  int InFlight() const override;
  void Stop() override;
  // Copies the device counters on the stats stream and waits for them; the last good value if
  // that fails.
  uint64_t ReadItemCounter() override;

  // The whole device counter block (batches, items, per-bucket batches, non-finite outputs), read
  // as ReadItemCounter does. Collector thread (or tests) only.
  absl::StatusOr<DeviceCounters> ReadCounters();
  const std::vector<int>& buckets() const { return buckets_; }
  // False once a CUDA call failed.
  bool healthy() const { return healthy_.load(std::memory_order_acquire); }
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
  struct Slot {
    PinnedHostBuffer input_staging;
    PinnedHostBuffer output_staging;
    DeviceBuffer input_device;
    DeviceBuffer output_device;
    // input copy, compute, output copy: begin and end of each (timing events).
    std::vector<CudaEvent> events = {};
    // Per bucket, with graphs on.
    std::vector<std::optional<CudaGraphExec>> graphs = {};
  };
  struct Work {
    Batch batch;
    int slot = -1;
    int bucket = -1;
    // Why the batch could not be issued (then nothing of it is on the device).
    absl::Status issued;
  };
  enum EventIndex { kInBegin, kInEnd, kComputeBegin, kComputeEnd, kOutBegin, kOutEnd, kEvents };

  CudaExecutor(const ModelConfig& config, std::unique_ptr<CudaModelInstance> model,
               CudaExecutorOptions options, std::vector<int> buckets, CudaStream h2d,
               CudaStream compute, CudaStream d2h, CudaStream stats, DeviceBuffer counters,
               PinnedHostBuffer counters_host);

  absl::Status Initialize();
  absl::Status WarmUpSlot(int slot);
  // The model's kernels for `bucket` on the compute stream, reading and writing `slot`'s buffers.
  absl::Status EnqueueModel(int slot, int bucket);
  absl::Status Gather(const Batch& batch, int slot, int bucket);
  absl::Status Issue(int slot, int bucket, int items);
  void CompletionLoop();
  void Finish(Work& work);
  void Fail(Work& work, const absl::Status& status);
  // Records the first fault; returns whether this call was the first.
  bool MarkUnhealthy(const absl::Status& status);

  const ModelConfig& config_;
  const std::unique_ptr<CudaModelInstance> model_;
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
  std::vector<Slot> slots_;

  mutable std::mutex mu_;
  std::condition_variable completion_cv_;
  std::vector<int> free_slots_;        // guarded by mu_
  std::deque<Work> completion_queue_;  // guarded by mu_
  int in_flight_ = 0;                  // guarded by mu_
  bool stopping_ = false;              // guarded by mu_
  absl::Status fault_;                 // guarded by mu_: the first fault
  bool fault_reported_ = false;        // completion thread only

  std::atomic<bool> healthy_{true};
  std::atomic<bool> inject_fault_{false};
  std::mutex counters_mu_;              // serializes counter reads (one pinned buffer)
  uint64_t last_items_ = 0;             // guarded by counters_mu_
  std::vector<RequestTiming> timings_;  // completion thread only
  std::mutex stop_mu_;
  std::thread completion_thread_;
};

}  // namespace sluice::engine::cuda
