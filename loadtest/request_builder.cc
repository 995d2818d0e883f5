#include "loadtest/request_builder.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/random_input.h"
#include "client/tensor_codec.h"
#include "client/tensor_json.h"
#include "common/check.h"

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
    absl::StatusOr<inference::ModelInferRequest> random = client::MakeRandomRequest(
        *shaped, spec.batch_size, spec.seed, spec.sequence_length, spec.token_id_limit);
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

int64_t RequestTokens(const inference::ModelInferRequest& request) {
  // The mask decides when present; input_ids' element count otherwise.
  for (const bool mask : {true, false}) {
    for (int i = 0; i < request.inputs_size() && i < request.raw_input_contents_size(); ++i) {
      const auto& input = request.inputs(i);
      if (input.name() != (mask ? "attention_mask" : "input_ids")) continue;
      const size_t width = input.datatype() == "INT64" ? 8 : input.datatype() == "INT32" ? 4 : 0;
      if (width == 0) return 0;
      const std::string& raw = request.raw_input_contents(i);
      if (!mask) return static_cast<int64_t>(raw.size() / width);
      int64_t ones = 0;
      for (size_t at = 0; at + width <= raw.size(); at += width) {
        int64_t value = 0;
        std::memcpy(&value, raw.data() + at, width);  // little-endian; a non-zero INT32 stays so
        ones += value != 0 ? 1 : 0;
      }
      return ones;
    }
  }
  return 0;
}

absl::StatusOr<std::unique_ptr<RaggedRequestSource>> RaggedRequestSource::Create(
    const inference::ModelMetadataResponse& metadata, const RequestSpec& spec,
    const client::LengthRange& range) {
  if (!spec.input_json.empty()) {
    return absl::InvalidArgumentError(
        "a sequence length range needs random or zero inputs (a JSON file fixes its own shapes)");
  }
  if (range.min < 1 || range.max < range.min) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad sequence length range ", range.min, ":", range.max));
  }
  absl::StatusOr<inference::ModelMetadataResponse> shaped = ApplyShapes(metadata, spec.shapes);
  if (!shaped.ok()) return shaped.status();
  // Bound the template before making it: every sequence dimension at 2 x MAX.
  const int64_t template_length = 2 * range.max;
  int64_t template_bytes = 0;
  for (const auto& tensor : shaped->inputs()) {
    absl::StatusOr<int64_t> size = client::DataTypeSize(tensor.datatype());
    if (!size.ok()) return size.status();
    double elements = static_cast<double>(*size > 0 ? *size : 1);
    for (int d = 0; d < tensor.shape_size(); ++d) {
      const int64_t dim = tensor.shape(d);
      elements *= static_cast<double>(dim >= 0 ? dim : d == 0 ? spec.batch_size : template_length);
    }
    template_bytes += static_cast<int64_t>(std::min(elements, 1e18));
  }
  if (template_bytes > kMaxTemplateBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("inputs for sequence lengths up to ", range.max, " at batch size ",
                     spec.batch_size, " would take ", template_bytes,
                     " bytes (the load tester keeps them at twice the longest "
                     "length, at most ",
                     kMaxTemplateBytes, "): lower the range's maximum or --batch-size"));
  }
  RequestSpec template_spec = spec;
  template_spec.sequence_length = template_length;
  absl::StatusOr<inference::ModelInferRequest> built = BuildRequest(metadata, template_spec);
  if (!built.ok()) return built.status();

  auto source = std::unique_ptr<RaggedRequestSource>(new RaggedRequestSource());
  source->range_ = range;
  source->seed_ = spec.seed;
  bool any_sequence_dim = false;
  for (int i = 0; i < built->inputs_size(); ++i) {
    const auto& tensor = built->inputs(i);
    auto declared = std::find_if(shaped->inputs().begin(), shaped->inputs().end(),
                                 [&](const auto& t) { return t.name() == tensor.name(); });
    CHECK(declared != shaped->inputs().end());  // BuildRequest made it from this metadata
    Input input;
    input.shape.assign(tensor.shape().begin(), tensor.shape().end());
    for (int d = 0; d < declared->shape_size(); ++d) {
      const bool sequence = d > 0 && declared->shape(d) == -1;
      input.sequence_dims.push_back(sequence);
      any_sequence_dim |= sequence;
    }
    absl::StatusOr<int64_t> size = client::DataTypeSize(tensor.datatype());
    if (!size.ok()) return size.status();
    input.element_size = *size;
    if (input.element_size <= 0 && std::find(input.sequence_dims.begin(), input.sequence_dims.end(),
                                             true) != input.sequence_dims.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", tensor.name(), "' of model '", metadata.name(),
                       "' is BYTES with a -1 dimension: a sequence length range varies "
                       "fixed-size (token id) inputs only"));
    }
    input.raw = built->raw_input_contents(i);
    source->inputs_.push_back(std::move(input));
  }
  if (!any_sequence_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", metadata.name(),
                     "' has no -1 dimension left for a sequence length range to vary (--shape "
                     "fixes them all, or the model takes fixed shapes)"));
  }
  built->clear_raw_input_contents();
  source->header_ = *std::move(built);
  return source;
}

int64_t RaggedRequestSource::Length(uint64_t index) const {
  return client::DrawLength(range_, seed_, index);
}

std::shared_ptr<const inference::ModelInferRequest> RaggedRequestSource::Make(
    uint64_t index) const {
  return MakeOfLength(Length(index), index);
}

std::shared_ptr<const inference::ModelInferRequest> RaggedRequestSource::MakeLongest() const {
  return MakeOfLength(range_.max, 0);
}

std::string RaggedRequestSource::Describe() const {
  std::vector<std::string> parts;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    std::vector<std::string> dims;
    for (size_t d = 0; d < inputs_[i].shape.size(); ++d) {
      dims.push_back(inputs_[i].sequence_dims[d] ? absl::StrCat(range_.min, "..", range_.max)
                                                 : absl::StrCat(inputs_[i].shape[d]));
    }
    const auto& tensor = header_.inputs(static_cast<int>(i));
    parts.push_back(
        absl::StrCat(tensor.name(), " ", tensor.datatype(), " [", absl::StrJoin(dims, ","), "]"));
  }
  return absl::StrJoin(parts, "; ");
}

std::shared_ptr<const inference::ModelInferRequest> RaggedRequestSource::MakeOfLength(
    int64_t length, uint64_t index) const {
  auto request = std::make_shared<inference::ModelInferRequest>(header_);
  // One offset per request (in elements, relative to each input's free room), drawn from a seed
  // apart from the length's.
  const uint64_t offset_bits = client::DrawLength({1, int64_t{1} << 62}, ~seed_, index) - 1;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const Input& input = inputs_[i];
    auto* shape = request->mutable_inputs(static_cast<int>(i))->mutable_shape();
    int64_t elements = 1;
    for (size_t d = 0; d < input.shape.size(); ++d) {
      const int64_t dim = input.sequence_dims[d] ? length : input.shape[d];
      shape->Set(static_cast<int>(d), dim);
      elements *= dim;
    }
    if (input.element_size <= 0) {  // BYTES without a sequence dimension: as made
      request->add_raw_input_contents(input.raw);
      continue;
    }
    const int64_t template_elements = static_cast<int64_t>(input.raw.size()) / input.element_size;
    const int64_t room = template_elements - elements;  // >= 0: the template is longer
    const int64_t offset = static_cast<int64_t>(offset_bits % static_cast<uint64_t>(room + 1));
    request->add_raw_input_contents(
        input.raw.substr(static_cast<size_t>(offset * input.element_size),
                         static_cast<size_t>(elements * input.element_size)));
  }
  return request;
}

}  // namespace sluice::loadtest
