#pragma once

// Conversion between KServe v2 protocol messages and engine requests/responses. Inputs in
// `raw_input_contents` are borrowed zero-copy; typed `contents` are converted into buffers that
// the request's keep-alive owns. Every size is checked (with overflow checks) against the declared
// shape and data type before any byte is touched.

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/inference_request.h"
#include "engine/engine.h"
#include "proto/grpc_service.pb.h"
#include "server/shared_memory/tensor_placement.h"

namespace sluice::server {

namespace shm {
class SharedMemoryRegistry;
}

// Longest name a request may carry: model, input, requested output, parameter key. Longer names
// are refused (InvalidArgument, the name echoed cut) before anything else echoes them.
inline constexpr size_t kMaxRequestNameBytes = 255;
// Longest request id (it is echoed in the answer and the access log).
inline constexpr size_t kMaxRequestIdBytes = 1024;

// Parses a KServe version string: "" -> -1 (newest), else a positive integer (at most 19 digits).
absl::StatusOr<int64_t> ParseModelVersion(const std::string& version);

// InvalidArgument if a name in `message` is longer than the bounds above (ToEngineRequest checks
// this first).
absl::Status CheckRequestNames(const inference::ModelInferRequest& message);

// How much earlier than the call's deadline the engine answers a request that expires in its
// queue, so that the client gets the server's DEADLINE_EXCEEDED before its own timer fires. (It
// was first meant to beat gRPC 1.51's server deadline timer, whose ending of the stream made the
// Finish() after it send a second trailers + RST_STREAM; that timer is now off,
// GRPC_ARG_ENABLE_DEADLINE_CHECKS in server/main/grpc_server_builder.cc.)
inline constexpr std::chrono::milliseconds kAnswerBeforeGrpcDeadline{20};

// A gRPC deadline (system clock; time_point::max() for none) on the steady clock the engine
// schedules with, `lead` earlier (see kAnswerBeforeGrpcDeadline); nullopt for none.
std::optional<std::chrono::steady_clock::time_point> SteadyDeadline(
    std::chrono::system_clock::time_point grpc_deadline,
    std::chrono::milliseconds lead = kAnswerBeforeGrpcDeadline);

// Builds the engine request for `message`. `message_owner` keeps the message alive while the
// engine holds views into it (may be null when the caller guarantees that, as a unary gRPC call
// does until it finishes). InvalidArgument names the tensor and what is wrong.
//
// Shared memory (Triton's extension): an input or requested output whose parameters name a
// `shared_memory_region` (with `shared_memory_byte_size`, optionally `shared_memory_offset`) is
// resolved in `registry` (nullable: then such a tensor is refused). Inputs become views into the
// region (raw_input_contents then holds entries only for the other inputs, in order, as
// tritonclient sends them); outputs get an entry in `output_placements` (required when registry
// is set), which the caller hands to ToProtoResponse when the request completes. The request's
// keep-alive holds the input regions' leases.
absl::StatusOr<std::unique_ptr<engine::InferenceRequest>> ToEngineRequest(
    const inference::ModelInferRequest& message, std::shared_ptr<const void> message_owner,
    engine::InferenceRequest::Completion on_complete,
    const shm::SharedMemoryRegistry* registry = nullptr,
    std::vector<shm::OutputPlacement>* output_placements = nullptr);

// Fills `out` from the engine's answer: one raw_output_contents entry per output, in order.
void ToProtoResponse(engine::InferenceResponse&& response, inference::ModelInferResponse* out);

// As above, first writing the outputs that have a placement into their shared-memory regions:
// such an output carries its region's parameters and no bytes (an empty raw_output_contents
// entry when other outputs carry bytes, none when every output is in shared memory). An output
// larger than its placement fails the whole answer (InvalidArgument); `out` is then untouched.
absl::Status ToProtoResponse(engine::InferenceResponse&& response,
                             const std::vector<shm::OutputPlacement>& placements,
                             inference::ModelInferResponse* out);

// What a model's tokenizer (its preparation stage: text inputs tokenized on the engine's pool) is
// called in ModelStatistics: `<model>/tokenizer`, an entry of its own, as Triton reports the
// composing model of an ensemble (a Python-backend tokenizer in front of the model) without new
// protocol fields. A '/' never occurs in a repository model name, so it never names a model.
inline constexpr absl::string_view kTokenizerStatsSuffix = "/tokenizer";

// The KServe ModelStatistics message for the engine's per-version stats: what gRPC's
// ModelStatistics answers and what HTTP's .../stats renders as JSON. Every version of a model that
// tokenizes text (ModelStatsSnapshot::prepares) is followed by its tokenizer's entry, same
// version: success = requests tokenized (handed to the pool -> tokenized), queue = the wait for a
// tokenizer thread, compute_infer = tokenization, fail = requests the stage failed,
// inference_count = items tokenized, execution_count = requests tokenized.
inference::ModelStatisticsResponse ToStatisticsResponse(
    const std::vector<engine::Engine::VersionStats>& stats);

// The ModelStatistics answer for `name` (empty: every model) and `version` (< 0: every loaded
// version), with the tokenizers' entries as ToStatisticsResponse gives them; `<model>/tokenizer`
// asks for the tokenizer's entries alone. NotFound for a model or version that is not loaded, or
// for `<model>/tokenizer` when the model has no tokenizer.
absl::StatusOr<inference::ModelStatisticsResponse> StatisticsResponse(const engine::Engine& engine,
                                                                      const std::string& name,
                                                                      int64_t version);

}  // namespace sluice::server
