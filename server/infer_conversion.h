#pragma once

// Conversion between KServe v2 protocol messages and engine requests/responses. Inputs in
// `raw_input_contents` are borrowed zero-copy; typed `contents` are converted into buffers that
// the request's keep-alive owns. Every size is checked (with overflow checks) against the declared
// shape and data type before any byte is touched.

#include <chrono>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "engine/inference_request.h"
#include "proto/grpc_service.pb.h"

namespace sluice::server {

// Parses a KServe version string: "" -> -1 (newest), else a positive integer.
absl::StatusOr<int64_t> ParseModelVersion(const std::string& version);

// A gRPC deadline (system clock; time_point::max() for none) on the steady clock the engine
// schedules with; nullopt for none.
std::optional<std::chrono::steady_clock::time_point> SteadyDeadline(
    std::chrono::system_clock::time_point grpc_deadline);

// Builds the engine request for `message`. `message_owner` keeps the message alive while the
// engine holds views into it (may be null when the caller guarantees that, as a unary gRPC call
// does until it finishes). InvalidArgument names the tensor and what is wrong.
absl::StatusOr<std::unique_ptr<engine::InferenceRequest>> ToEngineRequest(
    const inference::ModelInferRequest& message, std::shared_ptr<const void> message_owner,
    engine::InferenceRequest::Completion on_complete);

// Fills `out` from the engine's answer: one raw_output_contents entry per output, in order.
void ToProtoResponse(engine::InferenceResponse&& response, inference::ModelInferResponse* out);

}  // namespace sluice::server
