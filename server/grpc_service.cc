#include "server/grpc_service.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/infer_conversion.h"
#include "server/status_convert.h"

namespace sluice::server {
namespace {

using std::chrono::steady_clock;
using std::chrono::system_clock;

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::ServerUnaryReactor* Unimplemented(grpc::CallbackServerContext* context,
                                        absl::string_view what) {
  return FinishNow(context, grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                         absl::StrCat("sluice does not implement ", what)));
}

// The client's gRPC deadline, on the steady clock the engine schedules with.
std::optional<steady_clock::time_point> SteadyDeadline(const grpc::CallbackServerContext& context) {
  const system_clock::time_point deadline = context.deadline();
  if (deadline == system_clock::time_point::max()) return std::nullopt;
  const auto remaining = deadline - system_clock::now();
  return steady_clock::now() + std::chrono::duration_cast<steady_clock::duration>(remaining);
}

// ModelInfer's reactor: the default one plus OnCancel, so that a request whose client cancelled
// or went away (or whose deadline passed) leaves the engine's queue without running. Deletes
// itself when gRPC is done with the call, which is after Finish().
class UnaryInferReactor final : public grpc::ServerUnaryReactor {
 public:
  // `active_calls` (nullable) counts this call while the reactor lives.
  explicit UnaryInferReactor(std::atomic<int64_t>* active_calls) : active_calls_(active_calls) {
    if (active_calls_ != nullptr) active_calls_->fetch_add(1, std::memory_order_relaxed);
  }
  ~UnaryInferReactor() override {
    if (active_calls_ != nullptr) active_calls_->fetch_sub(1, std::memory_order_relaxed);
  }
  // Shared with the engine request, which may outlive this reactor by a little.
  const std::shared_ptr<std::atomic<bool>>& cancelled() const { return cancelled_; }
  void OnCancel() override { cancelled_->store(true, std::memory_order_relaxed); }
  void OnDone() override { delete this; }

 private:
  std::atomic<int64_t>* const active_calls_;
  const std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
};

void FillDuration(const engine::DurationStat& from, inference::StatisticDuration* to) {
  to->set_count(from.count);
  to->set_ns(from.ns);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ModelStreamInfer: requests are read one after another and submitted at once; answers are
// written in completion order (each carries its request id), one write in flight at a time as
// gRPC requires. Reading pauses while max_stream_in_flight answers are outstanding, so a client
// that never reads cannot make the server buffer without bound. The reactor deletes itself in
// OnDone, which gRPC calls only after Finish(); Finish() waits for every submitted request.
class InferenceService::StreamReactor final
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  StreamReactor(InferenceService* service, grpc::CallbackServerContext* context)
      : service_(service), context_(context) {
    if (auto* active = service_->options_.active_infer_calls; active != nullptr) {
      active->fetch_add(1, std::memory_order_relaxed);
    }
    StartNextRead();
  }
  ~StreamReactor() override {
    if (auto* active = service_->options_.active_infer_calls; active != nullptr) {
      active->fetch_sub(1, std::memory_order_relaxed);
    }
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed (or the call ended)
      std::unique_lock<std::mutex> lock(mu_);
      reads_done_ = true;
      MaybeFinishLocked(lock);
      return;
    }
    std::shared_ptr<inference::ModelInferRequest> message = std::move(read_message_);
    const std::string id = message->id();
    const std::string model_name = message->model_name();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++outstanding_;
    }
    const auto received = steady_clock::now();
    auto on_complete = [this, id, model_name](absl::StatusOr<engine::InferenceResponse> result) {
      inference::ModelStreamInferResponse response;
      if (result.ok()) {
        ToProtoResponse(*std::move(result), response.mutable_infer_response());
      } else {
        // Triton's convention: an error travels in error_message and the stream goes on.
        response.set_error_message(std::string(result.status().message()));
        response.mutable_infer_response()->set_id(id);
        response.mutable_infer_response()->set_model_name(model_name);
      }
      OnAnswer(std::move(response));
    };
    const inference::ModelInferRequest& message_ref = *message;
    absl::StatusOr<std::unique_ptr<engine::InferenceRequest>> request =
        ToEngineRequest(message_ref, std::move(message), on_complete);
    if (!request.ok()) {
      on_complete(request.status());
    } else {
      (*request)->received_time = received;
      (*request)->deadline = SteadyDeadline(*context_);
      (*request)->cancelled = cancelled_;
      service_->engine_->Submit(*std::move(request));
    }
    bool read_more = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (InFlightLocked() < service_->options_.max_stream_in_flight) {
        read_more = true;
      } else {
        read_paused_ = true;
      }
    }
    if (read_more) StartNextRead();
  }

  void OnWriteDone(bool ok) override {
    const inference::ModelStreamInferResponse* next = nullptr;
    bool resume_read = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      writes_.pop_front();
      if (!ok) {
        // The client is gone: drop what is queued, read no more, and keep counting answers
        // until every submitted request has been answered (only then may the call finish).
        write_failed_ = true;
        writes_.clear();
        if (read_paused_) {
          read_paused_ = false;
          reads_done_ = true;
        }
      }
      if (!writes_.empty()) {
        next = &writes_.front();
      } else {
        writing_ = false;
      }
      if (read_paused_ && !write_failed_ &&
          InFlightLocked() < service_->options_.max_stream_in_flight) {
        read_paused_ = false;
        resume_read = true;
      }
      if (next == nullptr && !resume_read) {
        MaybeFinishLocked(lock);
        return;
      }
    }
    if (next != nullptr) StartWrite(next);
    if (resume_read) StartNextRead();
  }

  // The client cancelled the stream or went away: what it still has queued will not run.
  void OnCancel() override { cancelled_->store(true, std::memory_order_relaxed); }

  void OnDone() override { delete this; }

 private:
  void StartNextRead() {
    read_message_ = std::make_shared<inference::ModelInferRequest>();
    StartRead(read_message_.get());
  }

  // Called from engine threads (or inline when a request is rejected at once).
  void OnAnswer(inference::ModelStreamInferResponse response) {
    const inference::ModelStreamInferResponse* to_write = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      --outstanding_;
      if (write_failed_ || finished_) {
        MaybeFinishLocked(lock);
        return;
      }
      writes_.push_back(std::move(response));
      if (!writing_) {
        writing_ = true;
        to_write = &writes_.front();  // deque references survive push_back/pop_front of others
      }
    }
    if (to_write != nullptr) StartWrite(to_write);
  }

  int InFlightLocked() const { return outstanding_ + static_cast<int>(writes_.size()); }

  // Finishes once reading ended and every submitted request has been answered and written.
  // Releases `lock` before calling Finish().
  void MaybeFinishLocked(std::unique_lock<std::mutex>& lock) {
    if (finished_ || !reads_done_ || outstanding_ > 0 || writing_) return;
    finished_ = true;
    lock.unlock();
    Finish(grpc::Status::OK);
  }

  InferenceService* const service_;
  grpc::CallbackServerContext* const context_;
  // The message being read; shared with the engine request that borrows its bytes.
  std::shared_ptr<inference::ModelInferRequest> read_message_;
  // Set by OnCancel; shared with every request this stream submitted.
  const std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);

  std::mutex mu_;
  std::deque<inference::ModelStreamInferResponse> writes_;  // guarded by mu_; front is in flight
  int outstanding_ = 0;                                     // submitted, not answered
  bool writing_ = false;
  bool reads_done_ = false;
  bool read_paused_ = false;
  bool write_failed_ = false;
  bool finished_ = false;
};

// ---------------------------------------------------------------------------------------------

InferenceService::InferenceService(engine::Engine* engine, ModelRepository* repository,
                                   ServiceOptions options)
    : engine_(engine),
      repository_(repository),
      options_(std::move(options)),
      control_(ModelControlOptions{.max_pending = options_.model_control_queue_size}) {}

grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* context,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  response->set_live(true);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* context,
                                                        const inference::ServerReadyRequest*,
                                                        inference::ServerReadyResponse* response) {
  response->set_ready(ready_.load() && !engine_->draining());
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  absl::StatusOr<int64_t> version = ParseModelVersion(request->version());
  if (!version.ok()) return FinishNow(context, ToGrpcStatus(version.status()));
  response->set_ready(engine_->IsModelReady(request->name(), *version));
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  response->set_name("sluice");
  response->set_version(options_.server_version);
  for (const char* extension : {"model_repository", "model_configuration", "statistics"}) {
    response->add_extensions(extension);
  }
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  absl::StatusOr<int64_t> version = ParseModelVersion(request->version());
  if (!version.ok()) return FinishNow(context, ToGrpcStatus(version.status()));
  absl::StatusOr<engine::Engine::ModelInfo> info = engine_->GetModel(request->name(), *version);
  if (!info.ok()) return FinishNow(context, ToGrpcStatus(info.status()));
  const engine::ModelConfig& config = *info->config;
  response->set_name(config.name);
  for (int64_t v : info->ready_versions) response->add_versions(absl::StrCat(v));
  response->set_platform(config.backend);
  auto fill = [&](const engine::TensorSpec& spec,
                  inference::ModelMetadataResponse::TensorMetadata* out) {
    out->set_name(spec.name);
    out->set_datatype(std::string(engine::DataTypeName(spec.dtype)));
    if (config.max_batch_size > 0) out->add_shape(-1);
    for (int64_t dim : spec.dims) out->add_shape(dim);
  };
  for (const auto& input : config.inputs) fill(input, response->add_inputs());
  for (const auto& output : config.outputs) fill(output, response->add_outputs());
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  const auto received = steady_clock::now();
  auto* reactor = new UnaryInferReactor(options_.active_infer_calls);
  // gRPC keeps `request` and `response` alive until Finish(): the engine may borrow the request's
  // raw bytes without a copy.
  absl::StatusOr<std::unique_ptr<engine::InferenceRequest>> converted = ToEngineRequest(
      *request, nullptr, [reactor, response](absl::StatusOr<engine::InferenceResponse> result) {
        if (!result.ok()) {
          reactor->Finish(ToGrpcStatus(result.status()));
          return;
        }
        ToProtoResponse(*std::move(result), response);
        reactor->Finish(grpc::Status::OK);
      });
  if (!converted.ok()) {
    reactor->Finish(ToGrpcStatus(converted.status()));
    return reactor;
  }
  (*converted)->received_time = received;
  (*converted)->deadline = SteadyDeadline(*context);
  (*converted)->cancelled = reactor->cancelled();
  engine_->Submit(*std::move(converted));
  return reactor;
}

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
InferenceService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  return new StreamReactor(this, context);
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* context, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  absl::StatusOr<int64_t> version = ParseModelVersion(request->version());
  if (!version.ok()) return FinishNow(context, ToGrpcStatus(version.status()));
  if (absl::Status status = engine_->GetModel(request->name(), *version).status(); !status.ok()) {
    return FinishNow(context, ToGrpcStatus(status));
  }
  absl::StatusOr<inference::ModelConfig> config = repository_->GetConfig(request->name());
  if (!config.ok()) return FinishNow(context, ToGrpcStatus(config.status()));
  *response->mutable_config() = *std::move(config);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  absl::StatusOr<int64_t> version = ParseModelVersion(request->version());
  if (!version.ok()) return FinishNow(context, ToGrpcStatus(version.status()));
  absl::StatusOr<std::vector<engine::Engine::VersionStats>> stats =
      engine_->GetStats(request->name(), *version);
  if (!stats.ok()) return FinishNow(context, ToGrpcStatus(stats.status()));
  for (const engine::Engine::VersionStats& entry : *stats) {
    const engine::ModelStatsSnapshot& s = entry.stats;
    inference::ModelStatistics* out = response->add_model_stats();
    out->set_name(entry.name);
    out->set_version(absl::StrCat(entry.version));
    out->set_last_inference(s.last_inference_ms);
    out->set_inference_count(s.inference_count);
    out->set_execution_count(s.execution_count);
    inference::InferStatistics* infer = out->mutable_inference_stats();
    FillDuration(s.success, infer->mutable_success());
    FillDuration(s.fail, infer->mutable_fail());
    FillDuration(s.queue, infer->mutable_queue());
    FillDuration(s.compute_input, infer->mutable_compute_input());
    FillDuration(s.compute_infer, infer->mutable_compute_infer());
    FillDuration(s.compute_output, infer->mutable_compute_output());
    for (const auto& [batch_size, batch] : s.batch_stats) {
      inference::InferBatchStatistics* b = out->add_batch_stats();
      b->set_batch_size(batch_size);
      FillDuration(batch.compute_input, b->mutable_compute_input());
      FillDuration(batch.compute_infer, b->mutable_compute_infer());
      FillDuration(batch.compute_output, b->mutable_compute_output());
    }
  }
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(
    grpc::CallbackServerContext* context, const inference::RepositoryIndexRequest* request,
    inference::RepositoryIndexResponse* response) {
  if (!request->repository_name().empty()) {
    return FinishNow(context,
                     grpc::Status(grpc::StatusCode::NOT_FOUND,
                                  absl::StrCat("unknown repository '", request->repository_name(),
                                               "' (sluice serves one repository)")));
  }
  for (const ModelRepository::IndexEntry& entry : repository_->Index(request->ready())) {
    auto* model = response->add_models();
    model->set_name(entry.name);
    model->set_version(entry.version);
    model->set_state(entry.state);
    model->set_reason(entry.reason);
  }
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(
    grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse*) {
  if (!options_.explicit_model_control) {
    return FinishNow(context, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                           "model load/unload needs the server started with "
                                           "--model-control-mode=explicit"));
  }
  if (!request->parameters().empty()) {
    return FinishNow(context,
                     grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                  "RepositoryModelLoad parameters (config or file overrides) "
                                  "are not supported by sluice"));
  }
  if (absl::Status status = ModelRepository::ValidateModelName(request->model_name());
      !status.ok()) {
    return FinishNow(context, ToGrpcStatus(status));
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status queued = control_.Submit(
      {.work = [this, name = request->model_name()] { return repository_->Load(name); },
       .answer = [reactor](const absl::Status& status) { reactor->Finish(ToGrpcStatus(status)); },
       .abandoned = [context] { return context->IsCancelled(); },
       .what = absl::StrCat("load of model '", request->model_name(), "'")});
  if (!queued.ok()) reactor->Finish(ToGrpcStatus(queued));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse*) {
  if (!options_.explicit_model_control) {
    return FinishNow(context, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                           "model load/unload needs the server started with "
                                           "--model-control-mode=explicit"));
  }
  if (absl::Status status = ModelRepository::ValidateModelName(request->model_name());
      !status.ok()) {
    return FinishNow(context, ToGrpcStatus(status));
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status queued = control_.Submit(
      {.work = [this, name = request->model_name()] { return repository_->Unload(name); },
       .answer = [reactor](const absl::Status& status) { reactor->Finish(ToGrpcStatus(status)); },
       .abandoned = [context] { return context->IsCancelled(); },
       .what = absl::StrCat("unload of model '", request->model_name(), "'")});
  if (!queued.ok()) reactor->Finish(ToGrpcStatus(queued));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* context, const inference::SystemSharedMemoryStatusRequest*,
    inference::SystemSharedMemoryStatusResponse*) {
  return Unimplemented(context, "system shared memory");
}
grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* context, const inference::SystemSharedMemoryRegisterRequest*,
    inference::SystemSharedMemoryRegisterResponse*) {
  return Unimplemented(context, "system shared memory");
}
grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* context, const inference::SystemSharedMemoryUnregisterRequest*,
    inference::SystemSharedMemoryUnregisterResponse*) {
  return Unimplemented(context, "system shared memory");
}
grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryStatus(
    grpc::CallbackServerContext* context, const inference::CudaSharedMemoryStatusRequest*,
    inference::CudaSharedMemoryStatusResponse*) {
  return Unimplemented(context, "CUDA shared memory");
}
grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryRegister(
    grpc::CallbackServerContext* context, const inference::CudaSharedMemoryRegisterRequest*,
    inference::CudaSharedMemoryRegisterResponse*) {
  return Unimplemented(context, "CUDA shared memory");
}
grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryUnregister(
    grpc::CallbackServerContext* context, const inference::CudaSharedMemoryUnregisterRequest*,
    inference::CudaSharedMemoryUnregisterResponse*) {
  return Unimplemented(context, "CUDA shared memory");
}
grpc::ServerUnaryReactor* InferenceService::TraceSetting(grpc::CallbackServerContext* context,
                                                         const inference::TraceSettingRequest*,
                                                         inference::TraceSettingResponse*) {
  return Unimplemented(context, "trace settings");
}
grpc::ServerUnaryReactor* InferenceService::LogSettings(grpc::CallbackServerContext* context,
                                                        const inference::LogSettingsRequest*,
                                                        inference::LogSettingsResponse*) {
  return Unimplemented(context, "log settings over gRPC (use --log-level)");
}

}  // namespace sluice::server
