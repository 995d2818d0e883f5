#include "engine/cuda/cuda_executor.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "engine/core/batch_answers.h"
#include "engine/core/device_fault.h"
#include "engine/cuda/cuda_check.h"

namespace sluice::engine::cuda {
namespace {

constexpr size_t kAlignment = 256;

size_t AlignUp(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

std::chrono::nanoseconds Elapsed(const CudaEvent& begin, const CudaEvent& end) {
  float ms = 0;
  // Both events fired (the completion thread waited for the last one); an error leaves 0.
  CUDA_LOG_IF_ERROR(cudaEventElapsedTime(&ms, begin.get(), end.get()));
  return std::chrono::nanoseconds(static_cast<int64_t>(static_cast<double>(ms) * 1e6));
}

}  // namespace

std::vector<int> BatchBuckets(const ModelConfig& config) {
  if (config.max_batch_size <= 0) return {1};
  std::set<int> buckets;
  if (config.dynamic_batching.has_value() &&
      !config.dynamic_batching->preferred_batch_sizes.empty()) {
    for (int size : config.dynamic_batching->preferred_batch_sizes) {
      if (size >= 1 && size <= config.max_batch_size) buckets.insert(size);
    }
  } else {
    for (int size = 1; size < config.max_batch_size; size *= 2) buckets.insert(size);
  }
  buckets.insert(config.max_batch_size);
  return std::vector<int>(buckets.begin(), buckets.end());
}

absl::StatusOr<std::unique_ptr<CudaExecutor>> CudaExecutor::Create(
    const ModelConfig& model_config, std::unique_ptr<CudaModelInstance> model,
    CudaExecutorOptions options) {
  if (model == nullptr) return absl::InvalidArgumentError("CudaExecutor needs a model instance");
  std::vector<int> buckets = BatchBuckets(model_config);
  return CreateWith(model_config, std::move(model), nullptr, std::move(buckets),
                    std::move(options));
}

absl::StatusOr<std::unique_ptr<CudaExecutor>> CudaExecutor::CreateRagged(
    const ModelConfig& model_config, std::unique_ptr<CudaRaggedModel> model,
    CudaExecutorOptions options) {
  if (model == nullptr) return absl::InvalidArgumentError("CudaExecutor needs a ragged model");
  if (model->buckets().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", model_config.name, "' has no ragged bucket"));
  }
  std::vector<int> buckets;
  for (const RaggedBucket& bucket : model->buckets()) {
    buckets.push_back(static_cast<int>(bucket.tokens));
  }
  return CreateWith(model_config, nullptr, std::move(model), std::move(buckets),
                    std::move(options));
}

absl::StatusOr<std::unique_ptr<CudaExecutor>> CudaExecutor::CreateWith(
    const ModelConfig& model_config, std::unique_ptr<CudaModelInstance> model,
    std::unique_ptr<CudaRaggedModel> ragged, std::vector<int> buckets,
    CudaExecutorOptions options) {
  if (options.executor.slot_count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("executor slot count ", options.executor.slot_count, " is < 1"));
  }
  if (options.executor.stats == nullptr) {
    return absl::InvalidArgumentError("CudaExecutor needs stats");
  }
  if (buckets.size() > static_cast<size_t>(DeviceCounters::kMaxBuckets)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", model_config.name, "' has ", buckets.size(),
                     " batch buckets; the device "
                     "counters hold ",
                     DeviceCounters::kMaxBuckets, " (list fewer preferred_batch_size values)"));
  }
  const int device = options.device;
  ScopedDevice scoped(device);
  ASSIGN_OR_RETURN(CudaStream h2d, CudaStream::Create(device));
  ASSIGN_OR_RETURN(CudaStream compute, CudaStream::Create(device));
  ASSIGN_OR_RETURN(CudaStream d2h, CudaStream::Create(device));
  ASSIGN_OR_RETURN(CudaStream stats, CudaStream::Create(device));
  ASSIGN_OR_RETURN(DeviceBuffer counters, DeviceBuffer::Create(device, sizeof(DeviceCounters)));
  ASSIGN_OR_RETURN(PinnedHostBuffer counters_host,
                   PinnedHostBuffer::Create(sizeof(DeviceCounters)));
  std::unique_ptr<CudaExecutor> executor(
      new CudaExecutor(model_config, std::move(model), std::move(ragged), std::move(options),
                       std::move(buckets), std::move(h2d), std::move(compute), std::move(d2h),
                       std::move(stats), std::move(counters), std::move(counters_host)));
  absl::Status initialized = executor->Initialize();
  if (!initialized.ok()) {
    return absl::Status(initialized.code(), absl::StrCat("model '", model_config.name, "' on cuda:",
                                                         device, ": ", initialized.message()));
  }
  ASSIGN_OR_RETURN(executor->pipeline_,
                   SlotPipeline::Create(
                       *executor, {.label = absl::StrCat("cuda:", device, " executor of model '",
                                                         model_config.name, "'"),
                                   .executor = executor->options_.executor,
                                   .issue_thread = false}));
  return executor;
}

CudaExecutor::CudaExecutor(const ModelConfig& config, std::unique_ptr<CudaModelInstance> model,
                           std::unique_ptr<CudaRaggedModel> ragged, CudaExecutorOptions options,
                           std::vector<int> buckets, CudaStream h2d, CudaStream compute,
                           CudaStream d2h, CudaStream stats, DeviceBuffer counters,
                           PinnedHostBuffer counters_host)
    : config_(config),
      model_(std::move(model)),
      ragged_(std::move(ragged)),
      options_(std::move(options)),
      device_(options_.device),
      buckets_(std::move(buckets)),
      h2d_stream_(std::move(h2d)),
      compute_stream_(std::move(compute)),
      d2h_stream_(std::move(d2h)),
      stats_stream_(std::move(stats)),
      counters_(std::move(counters)),
      counters_host_(std::move(counters_host)) {}

absl::Status CudaExecutor::Initialize() {
  size_t max_input_bytes = 0;
  size_t max_output_bytes = 0;
  if (ragged_ != nullptr) {
    // The model lays out its own blocks; one "tensor" each way, at offset 0.
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const int bucket = static_cast<int>(b);
      BucketLayout layout{.rows = 0,
                          .input_offsets = {0},
                          .input_bytes = ragged_->input_bytes(bucket),
                          .output_offsets = {0},
                          .output_bytes = ragged_->output_bytes(bucket)};
      max_input_bytes = std::max(max_input_bytes, layout.input_bytes);
      max_output_bytes = std::max(max_output_bytes, layout.output_bytes);
      layouts_.push_back(std::move(layout));
    }
  } else {
    // Fixed dims: each tensor's rows back to back, 256-byte aligned.
    for (const TensorSpec& input : config_.inputs) {
      ASSIGN_OR_RETURN(size_t bytes, FixedItemBytes(input));
      input_item_bytes_.push_back(bytes);
    }
    for (const TensorSpec& output : config_.outputs) {
      ASSIGN_OR_RETURN(size_t bytes, FixedItemBytes(output));
      output_item_bytes_.push_back(bytes);
    }
    for (int rows : buckets_) {
      BucketLayout layout;
      layout.rows = rows;
      for (size_t bytes : input_item_bytes_) {
        layout.input_offsets.push_back(layout.input_bytes);
        layout.input_bytes += AlignUp(bytes * rows);
      }
      for (size_t bytes : output_item_bytes_) {
        layout.output_offsets.push_back(layout.output_bytes);
        layout.output_bytes += AlignUp(bytes * rows);
      }
      max_input_bytes = std::max(max_input_bytes, layout.input_bytes);
      max_output_bytes = std::max(max_output_bytes, layout.output_bytes);
      layouts_.push_back(std::move(layout));
    }
  }
  // Zero-byte allocations are legal but give null pointers; keep every buffer addressable.
  max_input_bytes = std::max(max_input_bytes, kAlignment);
  max_output_bytes = std::max(max_output_bytes, kAlignment);

  ScopedDevice scoped(device_);
  for (int s = 0; s < options_.executor.slot_count; ++s) {
    ASSIGN_OR_RETURN(PinnedHostBuffer input_staging, PinnedHostBuffer::Create(max_input_bytes));
    ASSIGN_OR_RETURN(PinnedHostBuffer output_staging, PinnedHostBuffer::Create(max_output_bytes));
    ASSIGN_OR_RETURN(DeviceBuffer input_device, DeviceBuffer::Create(device_, max_input_bytes));
    ASSIGN_OR_RETURN(DeviceBuffer output_device, DeviceBuffer::Create(device_, max_output_bytes));
    Slot slot{.input_staging = std::move(input_staging),
              .output_staging = std::move(output_staging),
              .input_device = std::move(input_device),
              .output_device = std::move(output_device)};
    for (int e = 0; e < kEvents; ++e) {
      // The completion thread waits on kOutEnd: a blocking-sync event, so that the wait sleeps
      // in the driver instead of spinning a core for the whole batch (issue 15 item 2). The flag
      // is per event rather than cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync): that one
      // must be set before the context exists and changes every wait of every thread (and
      // library) in the process on that device; the event flag changes exactly the waits we
      // chose, whoever created the context first.
      ASSIGN_OR_RETURN(CudaEvent event, e == kOutEnd
                                            ? CudaEvent::CreateBlocking(device_, /*timing=*/true)
                                            : CudaEvent::Create(device_, /*timing=*/true));
      slot.events.push_back(std::move(event));
    }
    slot.graphs.resize(buckets_.size());
    if (ragged_ != nullptr) slot.ragged_state = ragged_->NewBatchState();
    slots_.push_back(std::move(slot));
  }
  ASSIGN_OR_RETURN(stats_done_, CudaEvent::CreateBlocking(device_, /*timing=*/false));
  for (int s = 0; s < options_.executor.slot_count; ++s) RETURN_IF_ERROR(WarmUpSlot(s));
  // Then every (slot, bucket) once through the whole batch sequence a real batch runs (H2D copy,
  // graph or kernels, counter kernel, D2H copy, the six events, the blocking wait): with lazy
  // module loading (the default) the counter kernel and the copies would otherwise first run on
  // the first real batch, and the model would be READY before all of its code had loaded.
  for (int s = 0; s < options_.executor.slot_count; ++s) {
    std::memset(slots_[s].input_staging.get(), 0, slots_[s].input_staging.bytes());
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const int bucket = static_cast<int>(b);
      if (ragged_ != nullptr) {
        // An empty batch (zero sequences) of this bucket, and its whole output block copied back.
        ragged_->PackEmpty(bucket, *slots_[s].ragged_state, slots_[s].input_staging.get());
        slots_[s].output_ranges = {{.offset = 0, .bytes = layouts_[b].output_bytes}};
      }
      absl::Status issued = IssueOnStreams(s, bucket, layouts_[b].rows);
      if (issued.ok()) issued = Wait(s);
      if (!issued.ok()) {
        return absl::Status(issued.code(), absl::StrCat("warming up batch bucket ", buckets_[b],
                                                        " (slot ", s, "): ", issued.message()));
      }
    }
  }
  // The warm-up batches counted: start from a known zero.
  CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(counters_.get(), 0, sizeof(DeviceCounters), compute_stream_.get()));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_stream_.get()));
  return absl::OkStatus();
}

absl::Status CudaExecutor::WarmUpSlot(int s) {
  Slot& slot = slots_[s];
  cudaStream_t stream = compute_stream_.get();
  CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(slot.input_device.get(), 0, slot.input_device.bytes(), stream));
  for (size_t b = 0; b < buckets_.size(); ++b) {
    // Eager first: lazy module loading and cuBLASLt's first-call setup happen outside capture.
    RETURN_IF_ERROR(EnqueueModel(s, static_cast<int>(b)));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    if (!options_.use_graphs) continue;
    absl::StatusOr<CudaGraphExec> graph =
        CudaGraphExec::Capture(stream, [&] { return EnqueueModel(s, static_cast<int>(b)); });
    if (!graph.ok()) {
      return absl::Status(graph.status().code(),
                          absl::StrCat("capturing the CUDA graph for batch bucket ", buckets_[b],
                                       ": ", graph.status().message()));
    }
    // Replay once: the model is READY only after every bucket's graph has run.
    RETURN_IF_ERROR(graph->Launch(stream));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    slot.graphs[b] = std::move(*graph);
  }
  return absl::OkStatus();
}

absl::Status CudaExecutor::EnqueueModel(int s, int bucket) {
  const Slot& slot = slots_[s];
  const BucketLayout& layout = layouts_[bucket];
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  auto* in_base = static_cast<std::byte*>(slot.input_device.get());
  auto* out_base = static_cast<std::byte*>(slot.output_device.get());
  for (size_t offset : layout.input_offsets) inputs.push_back(in_base + offset);
  for (size_t offset : layout.output_offsets) outputs.push_back(out_base + offset);
  if (ragged_ != nullptr) {
    return ragged_->Enqueue(compute_stream_.get(), inputs[0], outputs[0], bucket);
  }
  return model_->Enqueue(compute_stream_.get(), inputs, outputs, layout.rows);
}

CudaExecutor::~CudaExecutor() {
  if (pipeline_ != nullptr) pipeline_->Stop();
  // Nothing of ours may still run when the buffers and graphs are freed (a faulted batch can
  // leave work behind); errors are logged, the sticky ones included.
  ScopedDevice scoped(device_);
  for (const CudaStream* stream : {&h2d_stream_, &compute_stream_, &d2h_stream_, &stats_stream_}) {
    CUDA_LOG_IF_ERROR(cudaStreamSynchronize(stream->get()));
  }
}

absl::Status CudaExecutor::Gather(const Batch& batch, int s, int bucket) {
  Slot& slot = slots_[s];
  const BucketLayout& layout = layouts_[bucket];
  auto* base = static_cast<std::byte*>(slot.input_staging.get());
  slot.input_copies.clear();
  slot.input_leases.clear();
  bool any_on_device = false;
  for (const auto& request : batch.requests) {
    for (const TensorView& input : request->inputs) any_on_device |= input.on_device();
  }
  for (size_t i = 0; i < config_.inputs.size(); ++i) {
    std::byte* tensor = base + layout.input_offsets[i];
    const size_t tensor_bytes = input_item_bytes_[i] * layout.rows;
    size_t offset = 0;
    for (const auto& request : batch.requests) {
      const TensorView& input = request->inputs[i];
      const size_t expected = input_item_bytes_[i] * static_cast<size_t>(request->batch_size);
      // Submit validated the sizes; a mismatch here is the engine's bug, not the client's.
      if (input.byte_size() != expected || offset + expected > tensor_bytes) {
        return absl::InternalError(absl::StrCat("input '", config_.inputs[i].name, "' holds ",
                                                input.byte_size(), " bytes, expected ", expected));
      }
      if (input.on_device()) {
        // Read on the device by IssueOnStreams; the slot holds the mapping open until Wait saw
        // the batch finish (or, after a fault, until the destructor synchronized the streams).
        slot.input_copies.push_back({.device_offset = layout.input_offsets[i] + offset,
                                     .bytes = expected,
                                     .source = input.device->address(),
                                     .source_device = input.device->device()});
        slot.input_leases.push_back(input.device->keepalive);
      } else {
        if (expected > 0) std::memcpy(tensor + offset, input.data.data(), expected);
        if (any_on_device) AddHostCopy(slot, layout.input_offsets[i] + offset, expected);
      }
      offset += expected;
    }
    // Pad rows are zeros, so the padded part of the batch computes on defined values.
    std::memset(tensor + offset, 0, tensor_bytes - offset);
    if (any_on_device) AddHostCopy(slot, layout.input_offsets[i] + offset, tensor_bytes - offset);
  }
  return absl::OkStatus();
}

void CudaExecutor::AddHostCopy(Slot& slot, size_t device_offset, size_t bytes) {
  if (bytes == 0) return;
  // Adjacent host ranges (a request's rows, the next request's, the padding) become one copy.
  if (!slot.input_copies.empty()) {
    InputCopy& last = slot.input_copies.back();
    if (last.source == nullptr && last.device_offset + last.bytes == device_offset) {
      last.bytes += bytes;
      return;
    }
  }
  slot.input_copies.push_back({.device_offset = device_offset, .bytes = bytes});
}

absl::Status CudaExecutor::EnqueueInputCopies(int s, int bucket) {
  Slot& slot = slots_[s];
  cudaStream_t h2d = h2d_stream_.get();
  if (slot.input_copies.empty()) {
    // Every input is in host memory: one copy of the whole staged block.
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slot.input_device.get(), slot.input_staging.get(),
                                         layouts_[bucket].input_bytes, cudaMemcpyHostToDevice,
                                         h2d));
    return absl::OkStatus();
  }
  auto* device_base = static_cast<std::byte*>(slot.input_device.get());
  const auto* host_base = static_cast<const std::byte*>(slot.input_staging.get());
  for (const InputCopy& copy : slot.input_copies) {
    std::byte* destination = device_base + copy.device_offset;
    if (copy.source == nullptr) {
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(destination, host_base + copy.device_offset, copy.bytes,
                                           cudaMemcpyHostToDevice, h2d));
    } else if (copy.source_device == device_) {
      CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(destination, copy.source, copy.bytes, cudaMemcpyDeviceToDevice, h2d));
    } else {
      // A region on another GPU: the driver copies over the peer link where the two devices have
      // one, else through host memory; either way on this stream, in this order.
      CUDA_RETURN_IF_ERROR(cudaMemcpyPeerAsync(destination, device_, copy.source,
                                               copy.source_device, copy.bytes, h2d));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaExecutor::IssueOnStreams(int s, int bucket, int items) {
  Slot& slot = slots_[s];
  const BucketLayout& layout = layouts_[bucket];
  ScopedDevice scoped(device_);
  const auto event = [&](EventIndex index) { return slot.events[index].get(); };
  cudaStream_t h2d = h2d_stream_.get();
  cudaStream_t compute = compute_stream_.get();
  cudaStream_t d2h = d2h_stream_.get();

  CUDA_RETURN_IF_ERROR(cudaEventRecord(event(kInBegin), h2d));
  RETURN_IF_ERROR(EnqueueInputCopies(s, bucket));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(event(kInEnd), h2d));

  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute, event(kInEnd), 0));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(event(kComputeBegin), compute));
  if (inject_fault_.exchange(false, std::memory_order_acq_rel)) {
    RETURN_IF_ERROR(LaunchInvalidKernelForTest(compute));
  }
  if (slot.graphs[bucket].has_value()) {
    RETURN_IF_ERROR(slot.graphs[bucket]->Launch(compute));
  } else {
    RETURN_IF_ERROR(EnqueueModel(s, bucket));
  }
  // Counts only the batch's real items and rows, not the padding.
  auto* output_base = static_cast<std::byte*>(slot.output_device.get());
  const float* first_output = nullptr;
  int64_t output_floats = 0;
  const int32_t* ragged_counts = nullptr;
  if (ragged_ != nullptr) {
    // The sequence and token counts as the device received them (the input block's first two
    // int32), so the tokens counted are the ones this batch's H2D copy delivered.
    ragged_counts = static_cast<const int32_t*>(slot.input_device.get());
    const BlockRange scanned = ragged_->NonFiniteRange(*slot.ragged_state);
    if (scanned.bytes > 0) {
      first_output = reinterpret_cast<const float*>(output_base + scanned.offset);
      output_floats = static_cast<int64_t>(scanned.bytes / 4);
    }
  } else if (model_->counts_non_finite()) {
    first_output = reinterpret_cast<const float*>(output_base + layout.output_offsets[0]);
    output_floats = static_cast<int64_t>(output_item_bytes_[0] / 4) * items;
  }
  RETURN_IF_ERROR(LaunchCountBatch(static_cast<DeviceCounters*>(counters_.get()), items, bucket,
                                   first_output, output_floats, compute, ragged_counts));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(event(kComputeEnd), compute));

  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(d2h, event(kComputeEnd), 0));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(event(kOutBegin), d2h));
  if (ragged_ != nullptr) {
    // Only what the batch's requests want, only its real rows: one copy per output.
    auto* host_base = static_cast<std::byte*>(slot.output_staging.get());
    for (const BlockRange& range : slot.output_ranges) {
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_base + range.offset, output_base + range.offset,
                                           range.bytes, cudaMemcpyDeviceToHost, d2h));
    }
  } else {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slot.output_staging.get(), slot.output_device.get(),
                                         layout.output_bytes, cudaMemcpyDeviceToHost, d2h));
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(event(kOutEnd), d2h));
  return absl::OkStatus();
}

absl::Status CudaExecutor::IssueRagged(int s, const Batch& batch) {
  Slot& slot = slots_[s];
  // The model packs the requests' tokens into the staging and picks the bucket: InvalidArgument
  // (a lone request above the largest bucket) fails only this batch, before the device is
  // touched; INTERNAL is a fault.
  RETURN_IF_ERROR(ragged_->Pack(batch, *slot.ragged_state, slot.input_staging.get()));
  const int bucket = slot.ragged_state->bucket;
  if (bucket < 0 || bucket >= static_cast<int>(buckets_.size())) {
    return absl::InternalError(absl::StrCat("ragged model packed into bucket ", bucket));
  }
  slot.bucket = bucket;
  ragged_->OutputRanges(*slot.ragged_state, slot.output_ranges);
  ScopedDevice scoped(device_, ScopedDevice::Restore::kNo);
  absl::Status issued = IssueOnStreams(s, bucket, batch.items);
  if (!issued.ok() && issued.code() != absl::StatusCode::kInternal) {
    issued = WithInternalCode(issued);  // as Issue: part of the batch may be queued
  }
  return issued;
}

absl::Status CudaExecutor::Issue(int s, const Batch& batch) {
  if (ragged_ != nullptr) return IssueRagged(s, batch);
  // The smallest bucket that holds the batch (the last one is max_batch_size). The batcher never
  // builds a bigger batch, and submit validated every input's size: a failure before the device
  // is touched is the engine's bug, INTERNAL like a CUDA error.
  const int items = std::max(batch.items, 1);
  if (items > buckets_.back()) {
    return absl::InternalError(
        absl::StrCat("batch of ", items, " items exceeds the largest bucket ", buckets_.back()));
  }
  int bucket = static_cast<int>(buckets_.size()) - 1;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (buckets_[b] >= items) {
      bucket = static_cast<int>(b);
      break;
    }
  }
  slots_[s].bucket = bucket;
  // The batcher thread serves this model's instances only; every call sets its device first.
  ScopedDevice scoped(device_, ScopedDevice::Restore::kNo);
  RETURN_IF_ERROR(Gather(batch, s, bucket));
  absl::Status issued = IssueOnStreams(s, bucket, items);
  if (!issued.ok() && issued.code() != absl::StatusCode::kInternal) {
    // Part of the batch may already be queued on the streams (an out-of-memory error from a
    // launch, say): the slot must not be reused, so this is a fault like any other CUDA error.
    issued = WithInternalCode(issued);
  }
  return issued;
}

absl::Status CudaExecutor::Wait(int s) {
  // The completion thread is this executor's own: it keeps the device.
  ScopedDevice scoped(device_, ScopedDevice::Restore::kNo);
  // The one wait of the pipeline: the slot's last event (its output copy).
  const cudaError_t waited = cudaEventSynchronize(slots_[s].events[kOutEnd].get());
  if (waited != cudaSuccess) {
    // The slot keeps its leases on device inputs: the batch's copies may still be queued, and
    // the destructor synchronizes the streams before it releases them.
    return CudaError(waited, "cudaEventSynchronize(output copy done)", __FILE__, __LINE__);
  }
  // The batch's input copies are done (they precede its last event on the streams): the mappings
  // its device inputs were read from may close now, as far as this executor is concerned.
  slots_[s].input_leases.clear();
  return absl::OkStatus();
}

absl::Status CudaExecutor::Scatter(int s, const Batch& batch, SlotAnswers& answers) {
  const Slot& slot = slots_[s];
  if (ragged_ != nullptr) {
    RETURN_IF_ERROR(
        ragged_->Scatter(batch, *slot.ragged_state, slot.output_staging.get(), answers.responses));
    answers.input_time = Elapsed(slot.events[kInBegin], slot.events[kInEnd]);
    answers.infer_time = Elapsed(slot.events[kComputeBegin], slot.events[kComputeEnd]);
    answers.output_time = Elapsed(slot.events[kOutBegin], slot.events[kOutEnd]);
    return absl::OkStatus();
  }
  const BucketLayout& layout = layouts_[slot.bucket];
  const auto* base = static_cast<const std::byte*>(slot.output_staging.get());

  std::vector<InferenceResponse>& responses = answers.responses;
  responses.resize(batch.requests.size());
  int row = 0;
  for (size_t r = 0; r < batch.requests.size(); ++r) {
    const InferenceRequest& request = *batch.requests[r];
    for (size_t o : SelectedOutputs(request, config_)) {
      const TensorSpec& spec = config_.outputs[o];
      Tensor tensor;
      tensor.name = spec.name;
      tensor.dtype = spec.dtype;
      tensor.shape = spec.dims;
      if (config_.max_batch_size > 0) tensor.shape.insert(tensor.shape.begin(), request.batch_size);
      const size_t bytes = output_item_bytes_[o] * static_cast<size_t>(request.batch_size);
      const std::byte* begin = base + layout.output_offsets[o] + output_item_bytes_[o] * row;
      tensor.data.assign(begin, begin + bytes);
      responses[r].outputs.push_back(std::move(tensor));
    }
    row += request.batch_size;
  }
  const auto& events = slot.events;
  answers.input_time = Elapsed(events[kInBegin], events[kInEnd]);
  answers.infer_time = Elapsed(events[kComputeBegin], events[kComputeEnd]);
  answers.output_time = Elapsed(events[kOutBegin], events[kOutEnd]);
  return absl::OkStatus();
}

absl::StatusOr<DeviceCounters> CudaExecutor::ReadCounters() {
  common::MutexLock lock(&counters_mu_);
  // The collector thread reads every executor's counters, each call setting its own device.
  ScopedDevice scoped(device_, ScopedDevice::Restore::kNo);
  // Its own stream: the read neither waits for nor delays the batches. The counters are 64-bit
  // words updated atomically, so a read racing a batch sees each word before or after it.
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(counters_host_.get(), counters_.get(),
                                       sizeof(DeviceCounters), cudaMemcpyDeviceToHost,
                                       stats_stream_.get()));
  // A blocking-sync event rather than cudaStreamSynchronize, whose wait follows the device's
  // schedule flag (spinning, by default): the read-back sleeps like the completion waits.
  CUDA_RETURN_IF_ERROR(cudaEventRecord(stats_done_->get(), stats_stream_.get()));
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stats_done_->get()));
  DeviceCounters counters;
  std::memcpy(&counters, counters_host_.get(), sizeof(counters));
  last_items_ = counters.items;
  last_tokens_ = counters.tokens;
  return counters;
}

uint64_t CudaExecutor::ReadTokenCounter() {
  common::MutexLock lock(&counters_mu_);
  return last_tokens_;
}

uint64_t CudaExecutor::ReadItemCounter() {
  absl::StatusOr<DeviceCounters> counters = ReadCounters();
  if (counters.ok()) return counters->items;
  common::MutexLock lock(&counters_mu_);
  return last_items_;
}

}  // namespace sluice::engine::cuda
