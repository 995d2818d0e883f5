#pragma once

// The JSON form of requests and responses, as sluice-client reads and prints them.
// Pure functions, safe from any thread; the wire conventions are those of client/tensor_codec.h.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/grpc_service.pb.h"

namespace sluice::client {

// Parses request inputs from JSON text:
//   {"id": "optional", "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16],
//                                  "data": [1, 2, ...]}],
//    "outputs": [{"name": "OUTPUT0"}]}                       ("id" and "outputs" optional)
// "data" is row-major and flat (nested arrays are flattened); numbers for numeric types (integers
// for integer types, in range), true/false or 0/1 for BOOL, strings for BYTES. FP16/BF16 values
// are given as numbers and rounded. With `metadata` (borrowed, may be null) an input may leave out
// "datatype" and "shape" when the metadata fixes them; a metadata shape with a -1 dimension needs
// an explicit "shape". A given datatype or shape must agree with the metadata, and every input
// must be one the model declares. Returns the request (model_name = metadata->name() when given)
// or InvalidArgument naming the offending tensor and field.
absl::StatusOr<inference::ModelInferRequest> InputsFromJson(
    absl::string_view json_text, const inference::ModelMetadataResponse* metadata);

// The response as JSON: {"model_name": ..., "model_version": ..., "id": ..., "outputs": [{"name",
// "datatype", "shape", "data": [...]}]}, data flat; FP16/BF16 as numbers, BYTES as strings
// (invalid UTF-8 replaced by U+FFFD), NaN/Inf as null. `indent` < 0 gives one line. Errors as
// DecodeOutputs.
absl::StatusOr<std::string> ResponseToJson(const inference::ModelInferResponse& response,
                                           int indent = -1);

}  // namespace sluice::client
