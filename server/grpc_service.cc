#include "server/grpc_service.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "server/infer_conversion.h"
#include "server/model_config_parser.h"
#include "server/shared_memory/shared_memory_registry.h"
#include "server/status_convert.h"
#include "server/stream_infer_reactor.h"

namespace sluice::server {
namespace {

using std::chrono::steady_clock;

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
  // Both reactions are trivial (an atomic store; a delete), so gRPC may run them on whichever
  // thread finishes the call, as it does for its own DefaultReactor(). Without this, gRPC hands
  // every OnDone to its default executor thread (ServerCallbackCall::ScheduleOnDone): a thread
  // wake-up and a switch per request, ~15 % of the server's CPU at concurrency 16 (perf record,
  // "default-executo" threads), that the echo server, finishing with DefaultReactor(), never pays.
  bool InternalInlineable() override { return true; }

 private:
  std::atomic<int64_t>* const active_calls_;
  const std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace

InferenceService::InferenceService(engine::Engine* engine, ModelRepository* repository,
                                   ServiceOptions options)
    : engine_(engine),
      repository_(repository),
      options_(std::move(options)),
      control_(ModelControlOptions{.max_pending = options_.model_control_queue_size}) {
  CHECK(options_.serving != nullptr);  // ServiceOptions::serving is required
}

grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* context,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  response->set_live(options_.serving->live());
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* context,
                                                        const inference::ServerReadyRequest*,
                                                        inference::ServerReadyResponse* response) {
  response->set_ready(options_.serving->ready() && !engine_->draining());
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
  if (options_.shared_memory != nullptr) {
    response->add_extensions("system_shared_memory");
    response->add_extensions("cuda_shared_memory");
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
  auto* reactor = new UnaryInferReactor(&options_.serving->grpc_infer_calls());
  // gRPC keeps `request` and `response` alive until Finish(): the engine may borrow the request's
  // raw bytes without a copy.
  // Outputs placed in shared memory; the completion holds their regions' leases.
  auto placements = std::make_shared<std::vector<shm::OutputPlacement>>();
  absl::StatusOr<std::unique_ptr<engine::InferenceRequest>> converted = ToEngineRequest(
      *request, nullptr,
      [reactor, response, placements](absl::StatusOr<engine::InferenceResponse> result) {
        if (!result.ok()) {
          reactor->Finish(ToGrpcStatus(result.status()));
          return;
        }
        reactor->Finish(ToGrpcStatus(ToProtoResponse(*std::move(result), *placements, response)));
      },
      options_.shared_memory, placements.get());
  if (!converted.ok()) {
    reactor->Finish(ToGrpcStatus(converted.status()));
    return reactor;
  }
  (*converted)->received_time = received;
  (*converted)->deadline = SteadyDeadline(context->deadline());
  (*converted)->cancelled = reactor->cancelled();
  engine_->Submit(*std::move(converted));
  return reactor;
}

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
InferenceService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  StreamInferOptions stream_options;
  stream_options.max_in_flight = options_.max_stream_in_flight;
  stream_options.active_calls = &options_.serving->grpc_infer_calls();
  stream_options.max_pending_bytes = options_.max_stream_pending_bytes;
  stream_options.max_connection_pending_bytes = options_.max_connection_pending_bytes;
  stream_options.connection_pending_bytes = ConnectionPendingBytes(context->peer());
  stream_options.max_total_pending_bytes = options_.max_pending_stream_bytes_total;
  stream_options.total_pending_bytes = &stream_pending_bytes_;
  stream_options.shared_memory = options_.shared_memory;
  return NewStreamInferReactor(engine_, context, stream_options);
}

std::shared_ptr<std::atomic<int64_t>> InferenceService::ConnectionPendingBytes(
    const std::string& peer) {
  common::MutexLock lock(&connections_mu_);
  std::weak_ptr<std::atomic<int64_t>>& entry = connection_pending_bytes_[peer];
  std::shared_ptr<std::atomic<int64_t>> counter = entry.lock();
  if (counter == nullptr) {
    counter = std::make_shared<std::atomic<int64_t>>(0);
    entry = counter;
  }
  if (connection_pending_bytes_.size() >= sweep_at_) {
    std::erase_if(connection_pending_bytes_, [](const auto& e) { return e.second.expired(); });
    sweep_at_ = std::max<size_t>(64, 2 * connection_pending_bytes_.size());
  }
  return counter;
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(
    grpc::CallbackServerContext* context, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  absl::StatusOr<int64_t> version = ParseModelVersion(request->version());
  if (!version.ok()) return FinishNow(context, ToGrpcStatus(version.status()));
  absl::StatusOr<engine::Engine::ModelInfo> info = engine_->GetModel(request->name(), *version);
  if (!info.ok()) return FinishNow(context, ToGrpcStatus(info.status()));
  absl::StatusOr<inference::ModelConfig> config = repository_->GetConfig(request->name());
  if (!config.ok()) return FinishNow(context, ToGrpcStatus(config.status()));
  ApplyCompletedConfig(*info->config, info->resolved_parameters, *config);
  *response->mutable_config() = *std::move(config);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  absl::StatusOr<int64_t> version = ParseModelVersion(request->version());
  if (!version.ok()) return FinishNow(context, ToGrpcStatus(version.status()));
  absl::StatusOr<inference::ModelStatisticsResponse> stats =
      StatisticsResponse(*engine_, request->name(), *version);
  if (!stats.ok()) return FinishNow(context, ToGrpcStatus(stats.status()));
  *response = *std::move(stats);
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
    grpc::CallbackServerContext* context, const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* response) {
  if (options_.shared_memory == nullptr) return Unimplemented(context, "system shared memory");
  absl::StatusOr<std::vector<shm::RegionInfo>> regions =
      options_.shared_memory->Status(shm::RegionKind::kSystem, request->name());
  if (!regions.ok()) return FinishNow(context, ToGrpcStatus(regions.status()));
  for (const shm::RegionInfo& info : *regions) {
    auto& status = (*response->mutable_regions())[info.name];
    status.set_name(info.name);
    status.set_key(info.key);
    status.set_offset(info.offset);
    status.set_byte_size(info.byte_size);
  }
  return FinishNow(context, grpc::Status::OK);
}
grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse*) {
  if (options_.shared_memory == nullptr) return Unimplemented(context, "system shared memory");
  return FinishNow(context,
                   ToGrpcStatus(options_.shared_memory->RegisterSystem(
                       request->name(), request->key(), request->offset(), request->byte_size())));
}
grpc::ServerUnaryReactor* InferenceService::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse*) {
  if (options_.shared_memory == nullptr) return Unimplemented(context, "system shared memory");
  return FinishNow(context, ToGrpcStatus(options_.shared_memory->Unregister(
                                shm::RegionKind::kSystem, request->name())));
}
grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryStatus(
    grpc::CallbackServerContext* context, const inference::CudaSharedMemoryStatusRequest* request,
    inference::CudaSharedMemoryStatusResponse* response) {
  if (options_.shared_memory == nullptr) return Unimplemented(context, "CUDA shared memory");
  absl::StatusOr<std::vector<shm::RegionInfo>> regions =
      options_.shared_memory->Status(shm::RegionKind::kCuda, request->name());
  if (!regions.ok()) return FinishNow(context, ToGrpcStatus(regions.status()));
  for (const shm::RegionInfo& info : *regions) {
    auto& status = (*response->mutable_regions())[info.name];
    status.set_name(info.name);
    status.set_device_id(static_cast<uint64_t>(info.device_id));
    status.set_byte_size(info.byte_size);
  }
  return FinishNow(context, grpc::Status::OK);
}
grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryRegister(
    grpc::CallbackServerContext* context, const inference::CudaSharedMemoryRegisterRequest* request,
    inference::CudaSharedMemoryRegisterResponse*) {
  if (options_.shared_memory == nullptr) return Unimplemented(context, "CUDA shared memory");
  const std::string& handle = request->raw_handle();
  return FinishNow(context,
                   ToGrpcStatus(options_.shared_memory->RegisterCuda(
                       request->name(),
                       std::span<const std::byte>(reinterpret_cast<const std::byte*>(handle.data()),
                                                  handle.size()),
                       request->device_id(), request->byte_size())));
}
grpc::ServerUnaryReactor* InferenceService::CudaSharedMemoryUnregister(
    grpc::CallbackServerContext* context,
    const inference::CudaSharedMemoryUnregisterRequest* request,
    inference::CudaSharedMemoryUnregisterResponse*) {
  if (options_.shared_memory == nullptr) return Unimplemented(context, "CUDA shared memory");
  return FinishNow(context, ToGrpcStatus(options_.shared_memory->Unregister(shm::RegionKind::kCuda,
                                                                            request->name())));
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
