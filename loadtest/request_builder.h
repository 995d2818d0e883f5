#pragma once

// The request a load test sends: built once from the model's metadata (random or zero inputs of
// the given shapes) or read from a JSON file, then sent unchanged (the stream generator only sets
// its id). Pure functions; safe from any thread.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/grpc_service.pb.h"

namespace sluice::loadtest {

enum class InputFill {
  kRandom,  // client::RandomInput: deterministic pseudo-random values
  kZeros,   // every byte 0 (BYTES: empty strings)
};

struct RequestSpec {
  std::string model_version;  // "" = the server's choice
  // Items per request: the leading -1 (batch) dimension of every input. REQUIRES: >= 1.
  int64_t batch_size = 1;
  // Every other -1 dimension no `shapes` entry fixes (a sequence model's tokens). REQUIRES: >= 1.
  int64_t sequence_length = 1;
  InputFill fill = InputFill::kRandom;
  uint64_t seed = 0;
  // Shapes for inputs whose metadata shape has -1 dimensions, by input name, without the batch
  // dimension when the metadata shape starts with it (perf_analyzer's --shape). A -1 that no
  // shape fixes becomes sequence_length.
  std::map<std::string, std::vector<int64_t>> shapes;
  // When non-empty, the inputs come from this JSON text (client::InputsFromJson format) instead;
  // `batch_size`, `fill` and `shapes` must then be left at their defaults.
  std::string input_json;
  // The "priority" request parameter (the model's priority level, 1 = first); 0 = not sent.
  uint64_t priority = 0;
};

// Parses one --shape flag value, "NAME:D1,D2,...", into the input name and its dimensions
// (each >= 1). InvalidArgument naming the flag value otherwise.
absl::StatusOr<std::pair<std::string, std::vector<int64_t>>> ParseShapeFlag(absl::string_view text);

// The request for the model `metadata` describes. InvalidArgument for a shape given for an input
// the model does not have, a shape that contradicts the metadata, a JSON file that does not fit
// the model, or a spec that combines input_json with the other input options.
absl::StatusOr<inference::ModelInferRequest> BuildRequest(
    const inference::ModelMetadataResponse& metadata, const RequestSpec& spec);

// Bytes of input data in `request` (raw contents, or typed contents by element size).
int64_t RequestPayloadBytes(const inference::ModelInferRequest& request);

// "INPUT0 FP32 [8,1024]; INPUT1 INT32 [8,16]": the request's inputs for reports.
std::string DescribeInputs(const inference::ModelInferRequest& request);

// The batch size `request` carries: the leading dimension of its first input when the metadata
// shape of that input starts with -1, else 1.
int64_t RequestBatchSize(const inference::ModelMetadataResponse& metadata,
                         const inference::ModelInferRequest& request);

}  // namespace sluice::loadtest
