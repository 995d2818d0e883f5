#pragma once

// InferenceService: the KServe v2 GRPCInferenceService on gRPC's callback API. Every handler
// returns at once: ModelInfer converts and submits to the engine, and the engine's completion
// thread finishes the call later; repository load/unload run on the service's control thread.

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/mutex.h"
#include "engine/engine.h"
#include "proto/grpc_service.grpc.pb.h"
#include "server/model_control.h"
#include "server/model_repository.h"
#include "server/serving_state.h"

namespace sluice::server {

namespace shm {
class SharedMemoryRegistry;
}

struct ServiceOptions {
  // RepositoryModelLoad / RepositoryModelUnload are refused unless this is set
  // (--model-control-mode=explicit).
  bool explicit_model_control = false;
  // Reported by ServerMetadata.
  std::string server_version = "0.1.0";
  // Responses a stream may hold (submitted but not yet written) before the server stops reading
  // from it; HTTP/2 flow control then pushes back on the client.
  int max_stream_in_flight = 512;
  // Bytes a stream may hold (requests being served plus answers not yet written) before the
  // server stops reading from it (--grpc-max-stream-pending-bytes).
  int64_t max_stream_pending_bytes = int64_t{64} << 20;
  // The same over all streams of one connection (one peer address) together; past it a stream
  // of it holding anything stops reading (--grpc-max-connection-pending-bytes).
  int64_t max_connection_pending_bytes = int64_t{64} << 20;
  // The same over all streams together; past it a stream holding anything stops reading.
  int64_t max_pending_stream_bytes_total = int64_t{1} << 30;
  // The process's liveness, readiness and open-call counts (ServerLive and ServerReady answer it;
  // ModelInfer / ModelStreamInfer calls are counted in its grpc_infer_calls() from the handler
  // until gRPC is done with the call). Borrowed, required, must outlive the service.
  ServingState* serving = nullptr;
  // Load/unload calls that may wait behind the running one (--model-control-queue-size); beyond
  // it they are answered RESOURCE_EXHAUSTED at once.
  int model_control_queue_size = 16;
  // The process's shared-memory regions (Triton's system and CUDA shared-memory extensions),
  // shared with the HTTP front end; borrowed, nullable (then those RPCs answer UNIMPLEMENTED and
  // requests naming a region are refused), must outlive the service.
  shm::SharedMemoryRegistry* shared_memory = nullptr;
};

// Thread-safe; gRPC calls the handlers from its callback threads.
class InferenceService final : public inference::GRPCInferenceService::CallbackService {
 public:
  // `engine` and `repository` are borrowed and must outlive the service.
  InferenceService(engine::Engine* engine, ModelRepository* repository, ServiceOptions options);
  // StopModelControl() without a deadline.
  ~InferenceService() override = default;

  // Answers queued load/unload calls UNAVAILABLE and waits for the running one until
  // `deadline`; false if it still runs then (answered UNAVAILABLE; the caller must then end the
  // process with _exit(), see ModelControl::Stop).
  bool StopModelControl(std::chrono::steady_clock::time_point deadline) {
    return control_.Stop(deadline);
  }

  // The one load/unload queue of the process: the HTTP front end submits to it too, so that both
  // protocols share its bound, its order and its exit deadline.
  ModelControl* model_control() { return &control_; }

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelLoad(
      grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
      inference::RepositoryModelLoadResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelUnload(
      grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
      inference::RepositoryModelUnloadResponse* response) override;

  // Shared memory: the registry's Register/Unregister/Status (ServiceOptions::shared_memory).
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryStatusRequest* request,
      inference::SystemSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryRegisterRequest* request,
      inference::SystemSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryUnregisterRequest* request,
      inference::SystemSharedMemoryUnregisterResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryStatus(
      grpc::CallbackServerContext* context, const inference::CudaSharedMemoryStatusRequest* request,
      inference::CudaSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::CudaSharedMemoryRegisterRequest* request,
      inference::CudaSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::CudaSharedMemoryUnregisterRequest* request,
      inference::CudaSharedMemoryUnregisterResponse* response) override;
  // Not implemented: answered UNIMPLEMENTED with a message that says so.
  grpc::ServerUnaryReactor* TraceSetting(grpc::CallbackServerContext* context,
                                         const inference::TraceSettingRequest* request,
                                         inference::TraceSettingResponse* response) override;
  grpc::ServerUnaryReactor* LogSettings(grpc::CallbackServerContext* context,
                                        const inference::LogSettingsRequest* request,
                                        inference::LogSettingsResponse* response) override;

 private:
  engine::Engine* const engine_;
  ModelRepository* const repository_;
  const ServiceOptions options_;
  // The counter of bytes held by the streams of the connection `peer` (grpc::ServerContext::peer,
  // the client's address and port: one per connection), shared by those streams.
  std::shared_ptr<std::atomic<int64_t>> ConnectionPendingBytes(const std::string& peer);

  // Bytes held by all streams together (StreamInferOptions::total_pending_bytes).
  std::atomic<int64_t> stream_pending_bytes_{0};
  common::Mutex connections_mu_;
  // Each connection's counter while a stream of it lives; expired entries are swept as it grows.
  std::unordered_map<std::string, std::weak_ptr<std::atomic<int64_t>>> connection_pending_bytes_
      ABSL_GUARDED_BY(connections_mu_);
  size_t sweep_at_ ABSL_GUARDED_BY(connections_mu_) = 64;
  // Runs load/unload off the RPC threads; declared last so that it stops first.
  ModelControl control_;
};

}  // namespace sluice::server
