#pragma once

// Conversion between the KServe v2 HTTP/REST infer messages (JSON, optionally followed by Triton's
// binary tensor extension) and engine requests/responses; the HTTP counterpart of
// server/infer_conversion.h. Binary inputs are borrowed zero-copy from the request body (kept
// alive by the request's keep-alive); JSON `data` is converted to raw little-endian bytes.
// Validation of shapes and types against the model is the engine's (the same messages as gRPC);
// this layer checks only what the wire form itself can get wrong (malformed JSON, element counts,
// binary sizes and offsets), with overflow checks before any byte is touched.
//
// The tensor wire rules are common/wire/'s (FP16/BF16, raw values, BYTES framing, element counts
// through engine/core/tensor.h); what is HTTP's own is the JSON form of elements: read in
// json_conversion.cc (requests), written in json_response.cc (responses).

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/inference_request.h"
#include "server/shared_memory/tensor_placement.h"

namespace sluice::server::shm {
class SharedMemoryRegistry;
}

namespace sluice::server::http {

// How the response's outputs are to be encoded, from the request.
struct OutputEncoding {
  // The request's `binary_data_output` parameter: outputs not named in `binary` go binary.
  bool binary_default = false;
  // Per requested output: its `binary_data` parameter, if it set one.
  std::map<std::string, bool, std::less<>> binary;
  // Requested outputs placed in shared memory (their `shared_memory_*` parameters): written into
  // the client's region by EncodeResponse, which then sends no bytes for them.
  std::vector<shm::OutputPlacement> shared_memory;
};

// Default of --http-max-json-bytes: the largest JSON part of an infer request. JSON tensors are
// parsed and converted on an HTTP I/O thread (which serves other connections meanwhile) at about
// 100-200 MB/s of JSON for numbers, and simdjson allocates 10-14 bytes per JSON byte while it
// parses; 16 MiB bounds both (well under a second, about 160-220 MiB). Larger tensors belong in
// Triton's binary tensor extension, which is borrowed from the body without conversion.
inline constexpr size_t kDefaultMaxJsonBytes = size_t{16} << 20;

// The size of the JSON part of a body of `body_bytes`: all of it, or the
// Inference-Header-Content-Length header's count (nullopt: absent). InvalidArgument if the header
// is not a count within the body.
absl::StatusOr<size_t> JsonPartSize(size_t body_bytes,
                                    const std::optional<std::string>& header_length);

// Builds the engine request for an infer POST on `model_name` / `model_version` ("" = newest).
// `body` is the whole request body; `header_length` the Inference-Header-Content-Length header
// (nullopt: the body is all JSON). Fills `encoding`. InvalidArgument says what is wrong, also a
// JSON part over `max_json_bytes` (the routes refuse that with 413 before calling this).
// Inputs and outputs whose parameters name a `shared_memory_region` are resolved in `registry`
// (nullable: then they are refused); such an input has neither `data` nor binary_data_size.
absl::StatusOr<std::unique_ptr<engine::InferenceRequest>> ToEngineRequest(
    const std::string& model_name, const std::string& model_version,
    std::shared_ptr<const std::string> body, const std::optional<std::string>& header_length,
    engine::InferenceRequest::Completion on_complete, OutputEncoding* encoding,
    size_t max_json_bytes = kDefaultMaxJsonBytes,
    const shm::SharedMemoryRegistry* registry = nullptr);

// Bytes of document capacity the calling thread's JSON parser holds now (0: none).
size_t ThreadParserCapacityForTest();

struct EncodedResponse {
  // JSON, followed by the binary outputs if any.
  std::string body;
  // Length of the JSON part when binary outputs follow it (the Inference-Header-Content-Length
  // response header); nullopt when the body is all JSON.
  std::optional<size_t> header_length;
};
EncodedResponse FromEngineResponse(engine::InferenceResponse&& response,
                                   const OutputEncoding& encoding);
// As FromEngineResponse, first writing the outputs placed in shared memory
// (encoding.shared_memory) into their regions; each such output carries its region's parameters
// (shared_memory_region, shared_memory_byte_size = bytes written) and no data. InvalidArgument
// if a result is larger than its placement.
absl::StatusOr<EncodedResponse> EncodeResponse(engine::InferenceResponse&& response,
                                               const OutputEncoding& encoding);

// {"error": "<message>"}, the protocol's error body.
std::string ErrorJson(absl::string_view message);

}  // namespace sluice::server::http
