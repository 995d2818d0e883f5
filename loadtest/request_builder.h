#pragma once

// The request a load test sends: built once from the model's metadata (random or zero inputs of
// the given shapes) or read from a JSON file, then sent unchanged (the stream generator only sets
// its id). Pure functions; safe from any thread.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/random_input.h"
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
  // Random input_ids are drawn from [0, token_id_limit) (at most the model's vocabulary size).
  int64_t token_id_limit = client::kDefaultTokenIdLimit;
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

// Real tokens in `request`: the non-zero elements of its INT64/INT32 `attention_mask` when it has
// one, else the elements of `input_ids`, else 0 (not a sequence model's request, or its tokens
// are not known here: text the server tokenizes). Reads raw contents only.
int64_t RequestTokens(const inference::ModelInferRequest& request);

// Ragged traffic (sluice-loadtest --seq-len MIN:MAX): request number k of a run has each of its
// sequence dimensions (the -1 dimensions that BuildRequest fills with spec.sequence_length) equal
// to client::DrawLength(range, spec.seed, k): lengths uniform over [MIN, MAX], and the run's k-th
// request the same whatever order threads send in. The inputs are made once by BuildRequest at
// length 2 x MAX; each request takes a slice of them at an offset also drawn from (seed, k), so
// that requests of one length do not all carry the same ids (random input_ids stay below
// spec.token_id_limit, the mask all ones, token types zero: any slice of them is valid).
// Thread-safety: Make() is const and may be called from many threads at once.
class RaggedRequestSource {
 public:
  // InvalidArgument for what BuildRequest refuses, for a spec with input_json (a file fixes its
  // own shapes), for a model with no -1 dimension left to vary, for a BYTES input with one, or
  // when the inputs at length 2 x MAX would take more than kMaxTemplateBytes.
  static absl::StatusOr<std::unique_ptr<RaggedRequestSource>> Create(
      const inference::ModelMetadataResponse& metadata, const RequestSpec& spec,
      const client::LengthRange& range);

  // Request number `index` of the run.
  std::shared_ptr<const inference::ModelInferRequest> Make(uint64_t index) const;
  // A request at the range's longest length (the load tester's probe: a maximum the model
  // refuses fails before the load starts).
  std::shared_ptr<const inference::ModelInferRequest> MakeLongest() const;
  // The sequence length of request number `index`.
  int64_t Length(uint64_t index) const;
  // "input_ids INT64 [1,8..256]; attention_mask INT64 [1,8..256]": the inputs for reports.
  std::string Describe() const;

  // The most bytes the inputs made once may take (all inputs at length 2 x MAX).
  static constexpr int64_t kMaxTemplateBytes = int64_t{1} << 30;

 private:
  struct Input {
    std::vector<int64_t> shape;       // as in the template; sequence dimensions set per request
    std::vector<bool> sequence_dims;  // which dimensions take the drawn length
    int64_t element_size = 0;
    std::string raw;  // the template's bytes at length 2 x MAX
  };
  RaggedRequestSource() = default;
  std::shared_ptr<const inference::ModelInferRequest> MakeOfLength(int64_t length,
                                                                   uint64_t index) const;

  client::LengthRange range_;
  uint64_t seed_ = 0;
  inference::ModelInferRequest header_;  // the template without its raw contents
  std::vector<Input> inputs_;            // in header_'s input order
};

}  // namespace sluice::loadtest
