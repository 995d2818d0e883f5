#include "engine/cpu/cpu_executor.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "common/wire/bytes_elements.h"
#include "engine/core/batch_answers.h"
#include "engine/core/device_fault.h"
#include "engine/core/device_memory.h"
#include "engine/core/model_stats.h"

namespace sluice::engine::cpu {
namespace {

using Clock = std::chrono::steady_clock;

// Byte length of `elements` BYTES elements starting at `data` (already validated at submit).
size_t BytesElementsLength(std::span<const std::byte> data, int64_t elements) {
  wire::BytesElementReader reader(data);
  absl::string_view element;
  while (reader.index() < elements && reader.Next(element)) {
  }
  return reader.offset();
}

// Checks the model's outputs against its config before anything is scattered: a backend bug must
// fail the batch with INTERNAL, never send a client bytes it did not ask for.
absl::Status CheckOutputs(const ModelConfig& config, const std::vector<Tensor>& outputs,
                          int items) {
  if (outputs.size() != config.outputs.size()) {
    return absl::InternalError(absl::StrCat("model '", config.name, "' returned ", outputs.size(),
                                            " outputs, config declares ", config.outputs.size()));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    if (config.max_batch_size > 0 && (out.shape.empty() || out.shape[0] != items)) {
      return absl::InternalError(absl::StrCat("model '", config.name, "' output '", out.name,
                                              "' has shape ", ShapeToString(out.shape),
                                              ", expected batch dimension ", items));
    }
    ASSIGN_OR_RETURN(int64_t elements, ElementCount(out.shape));
    if (out.dtype == DataType::kBytes) {
      RETURN_IF_ERROR(ValidateBytesElements(out.name, out.data, elements));
    } else {
      ASSIGN_OR_RETURN(size_t bytes, FixedByteSize(out.dtype, elements));
      if (bytes != out.data.size()) {
        return absl::InternalError(absl::StrCat("model '", config.name, "' output '", out.name,
                                                "' holds ", out.data.size(), " bytes, shape ",
                                                ShapeToString(out.shape), " needs ", bytes));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuExecutor>> CpuExecutor::Create(
    const ModelConfig& model_config, std::unique_ptr<ModelInstance> instance,
    ExecutorOptions options, CpuExecutorOptions cpu_options) {
  if (instance == nullptr) return absl::InvalidArgumentError("CpuExecutor needs an instance");
  if (options.slot_count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("executor slot count ", options.slot_count, " is < 1"));
  }
  if (options.stats == nullptr) return absl::InvalidArgumentError("CpuExecutor needs stats");
  auto executor = std::unique_ptr<CpuExecutor>(
      new CpuExecutor(model_config, std::move(instance), options.slot_count));
  ASSIGN_OR_RETURN(
      executor->pipeline_,
      SlotPipeline::Create(*executor, {.label = absl::StrCat("model '", model_config.name, "'"),
                                       .executor = std::move(options),
                                       .issue_thread = !cpu_options.run_on_caller,
                                       .answer_on_issue_thread_when_idle = true,
                                       .answer_on_caller = cpu_options.run_on_caller}));
  return executor;
}

CpuExecutor::CpuExecutor(const ModelConfig& model_config, std::unique_ptr<ModelInstance> instance,
                         int slot_count)
    : config_(model_config), instance_(std::move(instance)), slots_(slot_count) {
  for (Slot& slot : slots_) slot.input_staging.resize(config_.inputs.size());
}

CpuExecutor::~CpuExecutor() {
  // Joins the pipeline's threads while the slots and the instance they use are still alive.
  if (pipeline_ != nullptr) pipeline_->Stop();
}

uint64_t CpuExecutor::ReadItemCounter() { return items_run_.load(std::memory_order_relaxed); }

absl::Status CpuExecutor::CopyFromDevice(const TensorView& input, std::span<std::byte> out) {
  const DeviceBytes& bytes = *input.device;
  // Synchronous, on this executor thread (ImportedDeviceMemory::CopyToHost waits for its copy):
  // this thread is the CPU backend's stand-in for a stream, and the model runs right after.
  absl::Status copied = bytes.memory->CopyToHost(bytes.offset, out);
  if (copied.ok()) return copied;
  const std::string message = absl::StrCat(
      "model '", config_.name, "': input '", input.name,
      "': copying it from device memory (CUDA shared memory) failed: ", copied.message());
  if (IsProcessFatal(copied)) {
    // The CUDA context is lost: a fault, and the engine ends the process.
    absl::Status fault = absl::InternalError(message);
    CopyPayloads(copied, fault);
    return fault;
  }
  // Any other copy error fails this batch only: the CPU instance itself is fine.
  return absl::FailedPreconditionError(message);
}

absl::StatusOr<std::vector<TensorView>> CpuExecutor::Gather(const Batch& batch, Slot& slot) {
  std::vector<TensorView> views(config_.inputs.size());
  const auto& requests = batch.requests;
  for (size_t i = 0; i < config_.inputs.size(); ++i) {
    // Inputs were matched to config order at submit (InferenceRequest::inputs is in config order).
    const TensorView& first = requests.front()->inputs[i];
    if (requests.size() == 1 && !first.on_device()) {
      views[i] = first;  // zero-copy: the model reads the request's own bytes
      continue;
    }
    size_t total = 0;
    for (const auto& request : requests) total += request->inputs[i].byte_size();
    std::vector<std::byte>& staging = slot.input_staging[i];
    staging.resize(total);
    size_t offset = 0;
    for (const auto& request : requests) {
      const TensorView& input = request->inputs[i];
      const size_t size = input.byte_size();
      if (input.on_device()) {
        RETURN_IF_ERROR(CopyFromDevice(input, std::span<std::byte>(staging.data() + offset, size)));
      } else if (size > 0) {
        std::memcpy(staging.data() + offset, input.data.data(), size);
      }
      offset += size;
    }
    views[i].name = first.name;
    views[i].dtype = first.dtype;
    views[i].shape = first.shape;
    if (config_.max_batch_size > 0) views[i].shape[0] = batch.items;
    views[i].data = std::span<const std::byte>(staging.data(), total);
  }
  return views;
}

absl::Status CpuExecutor::Issue(int s, const Batch& batch) {
  Slot& slot = slots_[s];
  slot.outputs.clear();
  slot.per_request.clear();
  const auto t0 = Clock::now();
  absl::StatusOr<std::vector<Tensor>> outputs = std::vector<Tensor>{};
  if (instance_->runs_ragged()) {
    // A sequence model packs the requests' tokens itself: nothing to gather.
    std::vector<const InferenceRequest*> requests;
    requests.reserve(batch.requests.size());
    for (const auto& request : batch.requests) {
      // Ragged models validate their requests themselves, and the engine refuses device inputs
      // to such models at submit (RefuseDeviceInputs); one here would be read as host memory.
      for (const TensorView& input : request->inputs) {
        if (input.on_device()) {
          return absl::InvalidArgumentError(absl::StrCat("model '", config_.name, "': input '",
                                                         input.name, "' is in device memory"));
        }
      }
      requests.push_back(request.get());
    }
    absl::StatusOr<std::vector<std::vector<Tensor>>> per_request = instance_->RunRagged(requests);
    if (per_request.ok()) {
      slot.per_request = *std::move(per_request);
    } else {
      outputs = per_request.status();
    }
    slot.input_time = std::chrono::nanoseconds{0};
    slot.infer_time = Clock::now() - t0;
  } else {
    ASSIGN_OR_RETURN(const std::vector<TensorView> inputs, Gather(batch, slot));
    const auto t1 = Clock::now();
    outputs = instance_->Run(inputs);
    const auto t2 = Clock::now();
    slot.input_time = t1 - t0;
    slot.infer_time = t2 - t1;
  }
  if (!outputs.ok()) {
    if (outputs.status().code() == absl::StatusCode::kInternal) {
      // The ModelInstance contract: INTERNAL is a fault of the backend, not of the request.
      return absl::InternalError(absl::StrCat(
          "model '", config_.name, "': backend fault in Run(): ", outputs.status().message()));
    }
    return outputs.status();
  }
  slot.outputs = *std::move(outputs);
  items_run_.fetch_add(static_cast<uint64_t>(batch.items), std::memory_order_relaxed);
  tokens_run_.fetch_add(static_cast<uint64_t>(batch.tokens), std::memory_order_relaxed);
  return absl::OkStatus();
}

// The model ran to completion inside Issue.
absl::Status CpuExecutor::Wait(int /*s*/) { return absl::OkStatus(); }

absl::Status CpuExecutor::ScatterRagged(Slot& slot, const Batch& batch, SlotAnswers& answers) {
  const auto t0 = Clock::now();
  std::vector<std::vector<Tensor>> per_request = std::move(slot.per_request);
  slot.per_request.clear();
  if (per_request.size() != batch.requests.size()) {
    return absl::InternalError(absl::StrCat("model '", config_.name,
                                            "': backend returned outputs for ", per_request.size(),
                                            " requests, the batch has ", batch.requests.size()));
  }
  answers.responses.resize(batch.requests.size());
  for (size_t r = 0; r < batch.requests.size(); ++r) {
    const InferenceRequest& request = *batch.requests[r];
    std::vector<Tensor>& outputs = per_request[r];
    if (outputs.size() != config_.outputs.size()) {
      return absl::InternalError(absl::StrCat("model '", config_.name, "': backend returned ",
                                              outputs.size(), " outputs, the config has ",
                                              config_.outputs.size()));
    }
    for (size_t index : SelectedOutputs(request, config_)) {
      Tensor& out = outputs[index];
      const TensorSpec& spec = config_.outputs[index];
      absl::StatusOr<int64_t> elements = ElementCount(out.shape);
      const bool ok = out.name == spec.name && out.dtype == spec.dtype &&
                      out.dtype != DataType::kBytes && elements.ok() &&
                      out.shape.size() == spec.dims.size() + 1 &&
                      out.shape[0] == request.batch_size &&
                      *FixedByteSize(out.dtype, *elements) == out.data.size();
      if (!ok) {
        return absl::InternalError(
            absl::StrCat("model '", config_.name, "': backend output '", out.name, "' of shape ",
                         ShapeToString(out.shape), " does not match config output '", spec.name,
                         "' for a request of ", request.batch_size, " items"));
      }
      answers.responses[r].outputs.push_back(std::move(out));
    }
  }
  answers.input_time = slot.input_time;
  answers.infer_time = slot.infer_time;
  answers.output_time = Clock::now() - t0;
  return absl::OkStatus();
}

absl::Status CpuExecutor::Scatter(int s, const Batch& batch, SlotAnswers& answers) {
  if (instance_->runs_ragged()) return ScatterRagged(slots_[s], batch, answers);
  // Taken out of the slot: nothing of this batch outlives its answers.
  std::vector<Tensor> outputs = std::move(slots_[s].outputs);
  slots_[s].outputs.clear();
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(CheckOutputs(config_, outputs, batch.items));

  std::vector<InferenceResponse>& responses = answers.responses;
  responses.resize(batch.requests.size());
  if (batch.requests.size() == 1) {
    // The whole output belongs to the one request.
    const InferenceRequest& request = *batch.requests.front();
    InferenceResponse& response = responses.front();
    for (size_t index : SelectedOutputs(request, config_)) {
      // Requested names are unique (checked at submit), so each output moves once.
      response.outputs.push_back(std::move(outputs[index]));
    }
  } else {
    // Slice each output along the batch dimension, request by request.
    std::vector<size_t> byte_offsets(outputs.size(), 0);
    std::vector<int64_t> elements_per_item(outputs.size(), 0);
    for (size_t o = 0; o < outputs.size(); ++o) {
      elements_per_item[o] = *ElementCount(outputs[o].shape) / batch.items;
    }
    for (size_t r = 0; r < batch.requests.size(); ++r) {
      const InferenceRequest& request = *batch.requests[r];
      std::vector<Tensor> sliced(outputs.size());
      for (size_t o = 0; o < outputs.size(); ++o) {
        const Tensor& out = outputs[o];
        const int64_t elements = elements_per_item[o] * request.batch_size;
        const std::span<const std::byte> rest =
            std::span<const std::byte>(out.data).subspan(byte_offsets[o]);
        const size_t length = out.dtype == DataType::kBytes ? BytesElementsLength(rest, elements)
                                                            : *FixedByteSize(out.dtype, elements);
        sliced[o].name = out.name;
        sliced[o].dtype = out.dtype;
        sliced[o].shape = out.shape;
        sliced[o].shape[0] = request.batch_size;
        sliced[o].data.assign(rest.begin(), rest.begin() + static_cast<ptrdiff_t>(length));
        byte_offsets[o] += length;
      }
      for (size_t index : SelectedOutputs(request, config_)) {
        responses[r].outputs.push_back(std::move(sliced[index]));
      }
    }
  }
  answers.input_time = slots_[s].input_time;
  answers.infer_time = slots_[s].infer_time;
  answers.output_time = Clock::now() - t0;
  return absl::OkStatus();
}

}  // namespace sluice::engine::cpu
