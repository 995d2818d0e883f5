#include "loadtest/request_builder.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/random_input.h"
#include "client/tensor_codec.h"
#include "client/tensor_json.h"

namespace sluice::loadtest {

absl::StatusOr<std::pair<std::string, std::vector<int64_t>>> ParseShapeFlag(
    absl::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos || colon == 0 || colon + 1 == text.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad --shape '", text, "' (expected NAME:D1,D2,..., e.g. INPUT0:1024)"));
  }
  std::vector<int64_t> dims;
  for (absl::string_view part : absl::StrSplit(text.substr(colon + 1), ',')) {
    int64_t dim = 0;
    if (!absl::SimpleAtoi(part, &dim) || dim < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad --shape '", text, "': dimension '", part, "' is not a number >= 1"));
    }
    dims.push_back(dim);
  }
  return std::make_pair(std::string(text.substr(0, colon)), std::move(dims));
}

namespace {

// `metadata` with the -1 dimensions of each input named in `shapes` replaced.
absl::StatusOr<inference::ModelMetadataResponse> ApplyShapes(
    inference::ModelMetadataResponse metadata,
    const std::map<std::string, std::vector<int64_t>>& shapes) {
  for (const auto& [name, dims] : shapes) {
    auto input = std::find_if(metadata.mutable_inputs()->begin(), metadata.mutable_inputs()->end(),
                              // Not [&]: clang before 16 cannot capture a structured binding.
                              [&name = name](const auto& tensor) { return tensor.name() == name; });
    if (input == metadata.mutable_inputs()->end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--shape names input '", name, "', which model '", metadata.name(), "' does not have"));
    }
    const std::vector<int64_t> declared(input->shape().begin(), input->shape().end());
    // The batch dimension stays as declared (-1, filled with the batch size later).
    size_t offset = 0;
    if (declared.size() == dims.size() + 1 && !declared.empty() && declared[0] == -1) {
      offset = 1;
    } else if (declared.size() != dims.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shape ", name, ":", absl::StrJoin(dims, ","), " has ", dims.size(),
                       " dimensions; the model declares [", absl::StrJoin(declared, ","), "]"));
    }
    for (size_t i = 0; i < dims.size(); ++i) {
      const int64_t want = declared[i + offset];
      if (want != -1 && want != dims[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("--shape ", name, ":", absl::StrJoin(dims, ","),
                         " contradicts the model's shape [", absl::StrJoin(declared, ","), "]"));
      }
      input->set_shape(static_cast<int>(i + offset), dims[i]);
    }
  }
  return metadata;
}

}  // namespace

absl::StatusOr<inference::ModelInferRequest> BuildRequest(
    const inference::ModelMetadataResponse& metadata, const RequestSpec& spec) {
  inference::ModelInferRequest request;
  if (!spec.input_json.empty()) {
    if (spec.batch_size != 1 || spec.fill != InputFill::kRandom || !spec.shapes.empty()) {
      return absl::InvalidArgumentError(
          "inputs from a JSON file fix their own shapes and values: leave out --batch-size, "
          "--shape and --input-data with it");
    }
    absl::StatusOr<inference::ModelInferRequest> from_json =
        client::InputsFromJson(spec.input_json, &metadata);
    if (!from_json.ok()) return from_json.status();
    request = *std::move(from_json);
  } else {
    absl::StatusOr<inference::ModelMetadataResponse> shaped = ApplyShapes(metadata, spec.shapes);
    if (!shaped.ok()) return shaped.status();
    absl::StatusOr<inference::ModelInferRequest> random =
        client::MakeRandomRequest(*shaped, spec.batch_size, spec.seed, spec.sequence_length);
    if (!random.ok()) return random.status();
    request = *std::move(random);
    if (spec.fill == InputFill::kZeros) {
      for (int i = 0; i < request.inputs_size(); ++i) {
        std::string& raw = *request.mutable_raw_input_contents(i);
        // A BYTES element of length 0 is its 4-byte zero length prefix: all zero bytes again.
        if (request.inputs(i).datatype() == "BYTES") {
          absl::StatusOr<int64_t> count = client::ElementCount(std::vector<int64_t>(
              request.inputs(i).shape().begin(), request.inputs(i).shape().end()));
          if (!count.ok()) return count.status();
          raw.assign(static_cast<size_t>(*count) * 4, '\0');
        } else {
          std::fill(raw.begin(), raw.end(), '\0');
        }
      }
    }
  }
  request.set_model_name(metadata.name());
  request.set_model_version(spec.model_version);
  if (spec.priority > 0) {
    (*request.mutable_parameters())["priority"].set_uint64_param(spec.priority);
  }
  return request;
}

int64_t RequestPayloadBytes(const inference::ModelInferRequest& request) {
  int64_t bytes = 0;
  for (const std::string& raw : request.raw_input_contents()) {
    bytes += static_cast<int64_t>(raw.size());
  }
  if (request.raw_input_contents_size() > 0) return bytes;
  for (const auto& input : request.inputs()) {
    const auto& c = input.contents();
    bytes += c.bool_contents_size() +
             4 * (c.int_contents_size() + c.uint_contents_size() + c.fp32_contents_size()) +
             8 * (c.int64_contents_size() + c.uint64_contents_size() + c.fp64_contents_size());
    for (const std::string& element : c.bytes_contents()) {
      bytes += 4 + static_cast<int64_t>(element.size());
    }
  }
  return bytes;
}

std::string DescribeInputs(const inference::ModelInferRequest& request) {
  std::vector<std::string> parts;
  for (const auto& input : request.inputs()) {
    parts.push_back(absl::StrCat(input.name(), " ", input.datatype(), " [",
                                 absl::StrJoin(input.shape(), ","), "]"));
  }
  return absl::StrJoin(parts, "; ");
}

int64_t RequestBatchSize(const inference::ModelMetadataResponse& metadata,
                         const inference::ModelInferRequest& request) {
  if (request.inputs_size() == 0 || request.inputs(0).shape_size() == 0) return 1;
  for (const auto& declared : metadata.inputs()) {
    if (declared.name() != request.inputs(0).name()) continue;
    if (declared.shape_size() > 0 && declared.shape(0) == -1) {
      return std::max<int64_t>(1, request.inputs(0).shape(0));
    }
  }
  return 1;
}

}  // namespace sluice::loadtest
