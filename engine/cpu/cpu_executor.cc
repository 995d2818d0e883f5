#include "engine/cpu/cpu_executor.h"

#include <cstring>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "common/wire/bytes_elements.h"
#include "engine/batch_answers.h"
#include "engine/model_stats.h"

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
    ExecutorOptions options) {
  if (instance == nullptr) return absl::InvalidArgumentError("CpuExecutor needs an instance");
  if (options.slot_count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("executor slot count ", options.slot_count, " is < 1"));
  }
  if (options.stats == nullptr) return absl::InvalidArgumentError("CpuExecutor needs stats");
  auto executor = std::unique_ptr<CpuExecutor>(
      new CpuExecutor(model_config, std::move(instance), std::move(options)));
  RETURN_IF_ERROR(executor->StartThreads());
  return executor;
}

absl::Status CpuExecutor::StartThreads() {
  // std::thread throws std::system_error when the process cannot start another thread; from a
  // constructor, a second thread failing with the first one running would std::terminate (a
  // joinable std::thread destroyed). Here the caller's destructor joins whatever did start.
  try {
    exec_thread_ = std::thread([this] { ExecutorLoop(); });
    completion_thread_ = std::thread([this] { CompletionLoop(); });
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("model '", config_.name, "': cannot start an executor thread: ", e.what()));
  }
  return absl::OkStatus();
}

CpuExecutor::CpuExecutor(const ModelConfig& model_config, std::unique_ptr<ModelInstance> instance,
                         ExecutorOptions options)
    : config_(model_config),
      instance_(std::move(instance)),
      options_(std::move(options)),
      slots_(options_.slot_count) {
  for (int i = options_.slot_count - 1; i >= 0; --i) free_slots_.push_back(i);
  for (Slot& slot : slots_) slot.input_staging.resize(config_.inputs.size());
}

CpuExecutor::~CpuExecutor() { Stop(); }

bool CpuExecutor::HasFreeSlot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !free_slots_.empty() && !stopping_ && fault_.ok();
}

bool CpuExecutor::MarkFaulted(const absl::Status& fault) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!fault_.ok()) return false;
  fault_ = fault;
  return true;
}

int CpuExecutor::InFlight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

uint64_t CpuExecutor::ReadItemCounter() { return items_run_.load(std::memory_order_relaxed); }

void CpuExecutor::Execute(Batch batch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    CHECK(!free_slots_.empty());
    CHECK(!stopping_);
    Work work;
    work.batch = std::move(batch);
    work.slot = free_slots_.back();
    free_slots_.pop_back();
    ++in_flight_;
    exec_queue_.push_back(std::move(work));
  }
  exec_cv_.notify_one();
}

void CpuExecutor::Stop() {
  std::lock_guard<std::mutex> stop_lock(stop_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  exec_cv_.notify_all();
  completion_cv_.notify_all();
  if (exec_thread_.joinable()) exec_thread_.join();
  if (completion_thread_.joinable()) completion_thread_.join();
}

absl::StatusOr<std::vector<TensorView>> CpuExecutor::Gather(const Batch& batch, Slot& slot) {
  std::vector<TensorView> views(config_.inputs.size());
  const auto& requests = batch.requests;
  for (size_t i = 0; i < config_.inputs.size(); ++i) {
    // Inputs were matched to config order at submit (InferenceRequest::inputs is in config order).
    const TensorView& first = requests.front()->inputs[i];
    if (requests.size() == 1) {
      views[i] = first;  // zero-copy: the model reads the request's own bytes
      continue;
    }
    size_t total = 0;
    for (const auto& request : requests) total += request->inputs[i].data.size();
    std::vector<std::byte>& staging = slot.input_staging[i];
    staging.resize(total);
    size_t offset = 0;
    for (const auto& request : requests) {
      const auto& data = request->inputs[i].data;
      if (!data.empty()) std::memcpy(staging.data() + offset, data.data(), data.size());
      offset += data.size();
    }
    views[i].name = first.name;
    views[i].dtype = first.dtype;
    views[i].shape = first.shape;
    views[i].shape[0] = batch.items;
    views[i].data = std::span<const std::byte>(staging.data(), total);
  }
  return views;
}

void CpuExecutor::ExecutorLoop() {
  for (;;) {
    Work work;
    absl::Status earlier_fault;
    {
      std::unique_lock<std::mutex> lock(mu_);
      exec_cv_.wait(lock, [&] { return stopping_ || !exec_queue_.empty(); });
      if (exec_queue_.empty()) {
        exec_done_ = true;
        completion_cv_.notify_all();
        return;
      }
      work = std::move(exec_queue_.front());
      exec_queue_.pop_front();
      earlier_fault = fault_;
    }
    if (!earlier_fault.ok()) {
      // Taken before the fault was seen: like the batches queued on a CUDA stream after a failed
      // launch, it fails with the instance rather than running on a broken one.
      work.outputs = absl::InternalError(absl::StrCat(
          "model '", config_.name,
          "': batch not run, its instance faulted earlier: ", earlier_fault.message()));
    } else {
      absl::Status injected = absl::OkStatus();
      if (options_.before_batch_for_test) injected = options_.before_batch_for_test();
      if (!injected.ok()) {
        work.outputs = absl::InternalError(
            absl::StrCat("model '", config_.name, "': injected test fault: ", injected.message()));
      } else {
        const auto t0 = Clock::now();
        if (instance_->runs_ragged()) {
          RunRagged(work);
        } else {
          absl::StatusOr<std::vector<TensorView>> inputs = Gather(work.batch, slots_[work.slot]);
          const auto t1 = Clock::now();
          if (inputs.ok()) {
            work.outputs = instance_->Run(*inputs);
          } else {
            work.outputs = inputs.status();
          }
          const auto t2 = Clock::now();
          work.input_time = t1 - t0;
          work.infer_time = t2 - t1;
        }
        if (!work.outputs.ok() && work.outputs.status().code() == absl::StatusCode::kInternal) {
          // The ModelInstance contract: INTERNAL is a fault of the backend, not of the request.
          work.outputs = absl::InternalError(
              absl::StrCat("model '", config_.name,
                           "': backend fault in Run(): ", work.outputs.status().message()));
        }
      }
      if (work.outputs.ok()) {
        items_run_.fetch_add(static_cast<uint64_t>(work.batch.items), std::memory_order_relaxed);
      } else if (work.outputs.status().code() == absl::StatusCode::kInternal) {
        // From here on HasFreeSlot() is false: the batcher hands this instance nothing more.
        work.faulted = MarkFaulted(work.outputs.status());
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      completion_queue_.push_back(std::move(work));
    }
    completion_cv_.notify_one();
  }
}

void CpuExecutor::CompletionLoop() {
  for (;;) {
    Work work;
    {
      std::unique_lock<std::mutex> lock(mu_);
      completion_cv_.wait(lock, [&] { return !completion_queue_.empty() || exec_done_; });
      if (completion_queue_.empty()) return;  // exec_done_ and nothing left
      work = std::move(completion_queue_.front());
      completion_queue_.pop_front();
    }
    absl::Status fault = work.faulted ? work.outputs.status() : absl::OkStatus();
    if (absl::Status malformed = Finish(work); !malformed.ok() && MarkFaulted(malformed)) {
      fault = std::move(malformed);
    }
    // After the batch's answers (ExecutorOptions::on_fault), before the slot is offered again.
    if (!fault.ok() && options_.on_fault) options_.on_fault(fault);
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_slots_.push_back(work.slot);
      --in_flight_;
    }
    if (options_.on_slot_freed) options_.on_slot_freed();
  }
}

absl::Status CpuExecutor::Finish(Work& work) {
  Batch& batch = work.batch;
  const auto t0 = Clock::now();
  absl::Status status = work.outputs.status();
  absl::Status malformed = absl::OkStatus();
  if (status.ok() && !instance_->runs_ragged()) {
    malformed = CheckOutputs(config_, *work.outputs, batch.items);
    status = malformed;
  }
  if (!status.ok()) {
    for (auto& request : batch.requests) {
      options_.stats->RecordFailure(*request, status.code());
      request->Complete(status);
    }
    return malformed;
  }

  std::vector<InferenceResponse> responses(batch.requests.size());
  if (instance_->runs_ragged()) {
    if (absl::Status malformed = FinishRagged(work, responses); !malformed.ok()) {
      for (auto& request : batch.requests) {
        options_.stats->RecordFailure(*request, malformed.code());
        request->Complete(malformed);
      }
      return malformed;
    }
  } else if (std::vector<Tensor>& outputs = *work.outputs; batch.requests.size() == 1) {
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
  const auto t1 = Clock::now();
  const std::chrono::nanoseconds output_time = t1 - t0;

  StampAnswers(batch, t1, responses, timings_);
  // Stats before answers: a client that reads ModelStatistics right after its answer sees itself.
  options_.stats->RecordBatch({.items = static_cast<uint64_t>(batch.items),
                               .input = work.input_time,
                               .infer = work.infer_time,
                               .output = output_time,
                               .requests = timings_});
  for (size_t r = 0; r < batch.requests.size(); ++r) {
    batch.requests[r]->Complete(std::move(responses[r]));
  }
  return absl::OkStatus();
}

void CpuExecutor::RunRagged(Work& work) {
  // Sequence models (the encoder) read each request's own inputs, of its own length: nothing to
  // gather, and the model packs them itself.
  const auto t0 = Clock::now();
  std::vector<const InferenceRequest*> requests;
  requests.reserve(work.batch.requests.size());
  for (const auto& request : work.batch.requests) requests.push_back(request.get());
  absl::StatusOr<std::vector<std::vector<Tensor>>> outputs = instance_->RunRagged(requests);
  work.infer_time = Clock::now() - t0;
  if (outputs.ok()) {
    work.per_request = *std::move(outputs);
    work.outputs = std::vector<Tensor>{};
  } else {
    work.outputs = outputs.status();
  }
}

absl::Status CpuExecutor::FinishRagged(Work& work, std::vector<InferenceResponse>& responses) {
  const Batch& batch = work.batch;
  if (work.per_request.size() != batch.requests.size()) {
    return absl::InternalError(
        absl::StrCat("model '", config_.name, "': backend returned outputs for ",
                     work.per_request.size(), " requests, the batch has ", batch.requests.size()));
  }
  for (size_t r = 0; r < batch.requests.size(); ++r) {
    const InferenceRequest& request = *batch.requests[r];
    std::vector<Tensor>& outputs = work.per_request[r];
    if (outputs.size() != config_.outputs.size()) {
      return absl::InternalError(absl::StrCat("model '", config_.name, "': backend returned ",
                                              outputs.size(), " outputs, the config has ",
                                              config_.outputs.size()));
    }
    for (size_t index : SelectedOutputs(request, config_)) {
      Tensor& out = outputs[index];
      const TensorSpec& spec = config_.outputs[index];
      absl::StatusOr<int64_t> elements = ElementCount(out.shape);
      const bool ok = out.name == spec.name && out.dtype == spec.dtype && elements.ok() &&
                      out.shape.size() == spec.dims.size() + 1 &&
                      out.shape[0] == request.batch_size && out.dtype != DataType::kBytes &&
                      *FixedByteSize(out.dtype, *elements) == out.data.size();
      if (!ok) {
        return absl::InternalError(
            absl::StrCat("model '", config_.name, "': backend output '", out.name, "' of shape ",
                         ShapeToString(out.shape), " does not match config output '", spec.name,
                         "' for a request of ", request.batch_size, " items"));
      }
      responses[r].outputs.push_back(std::move(out));
    }
  }
  return absl::OkStatus();
}

}  // namespace sluice::engine::cpu
