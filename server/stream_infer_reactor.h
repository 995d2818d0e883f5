#pragma once

// ModelStreamInfer's reactor (the bidirectional stream of the KServe v2 service): reads requests,
// submits them to the engine, writes the answers back in completion order.

#include <atomic>
#include <cstdint>
#include <memory>

#include "engine/engine.h"
#include "grpcpp/grpcpp.h"
#include "proto/grpc_service.pb.h"

namespace sluice::server {

namespace shm {
class SharedMemoryRegistry;
}

struct StreamInferOptions {
  // Responses a stream may hold (submitted but not yet written) before the server stops reading
  // from it; HTTP/2 flow control then pushes back on the client.
  int max_in_flight = 512;
  // Bytes the stream may hold (serialized size of its requests being served plus its answers
  // not yet written) before it stops reading.
  int64_t max_pending_bytes = int64_t{64} << 20;
  // Bytes all streams of one connection together may hold (summed in *connection_pending_bytes)
  // before every stream of it that holds anything stops reading: a client cannot multiply
  // max_pending_bytes by opening streams.
  int64_t max_connection_pending_bytes = int64_t{64} << 20;
  // The connection's sum, shared by its streams; nullable (no per-connection bound).
  std::shared_ptr<std::atomic<int64_t>> connection_pending_bytes;
  // A stream that held at least this many bytes at once gives the allocator's free memory back to
  // the system when it ends (ReleaseFreeMemory), so that a client that made the server buffer
  // does not leave its RSS behind; 0: never.
  int64_t release_memory_after_bytes = int64_t{8} << 20;
  // Bytes all streams together may hold (summed in *total_pending_bytes) before every stream
  // that holds anything stops reading.
  int64_t max_total_pending_bytes = int64_t{1} << 30;
  // The server-wide sum; borrowed, nullable (no server-wide bound), must outlive every stream.
  std::atomic<int64_t>* total_pending_bytes = nullptr;
  // Counts the stream while its reactor lives (sluice_grpc_infer_calls_active); borrowed,
  // nullable, must outlive every stream.
  std::atomic<int64_t>* active_calls = nullptr;
  // Shared-memory regions requests may name; borrowed, nullable (none: such requests are
  // refused), must outlive every stream.
  const shm::SharedMemoryRegistry* shared_memory = nullptr;
};

// A new reactor for one ModelStreamInfer call; gRPC owns it (it deletes itself in OnDone).
// `engine` is borrowed and must outlive the call; `context` is the call's.
grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
NewStreamInferReactor(engine::Engine* engine, grpc::CallbackServerContext* context,
                      StreamInferOptions options);

}  // namespace sluice::server
