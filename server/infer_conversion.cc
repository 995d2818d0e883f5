#include "server/infer_conversion.h"

#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/echo.h"
#include "common/status_macros.h"
#include "common/wire/typed_contents.h"
#include "engine/model_config.h"

namespace sluice::server {
namespace {

using engine::DataType;

// Owns the typed inputs converted to raw bytes, and the message the raw inputs point into.
struct RequestStorage {
  std::shared_ptr<const void> message;
  std::vector<std::vector<std::byte>> converted;
};

bool HasTypedContents(const inference::InferTensorContents& c) {
  return c.bool_contents_size() || c.int_contents_size() || c.int64_contents_size() ||
         c.uint_contents_size() || c.uint64_contents_size() || c.fp32_contents_size() ||
         c.fp64_contents_size() || c.bytes_contents_size();
}

// Converts the typed `contents` of one input to raw little-endian bytes (the wire rules:
// common/wire/typed_contents.h), and checks the count against the shape.
absl::Status ConvertTyped(const inference::ModelInferRequest::InferInputTensor& input,
                          DataType dtype, int64_t elements, std::vector<std::byte>& out) {
  const std::string& name = input.name();
  const wire::TypedConversion result = wire::TypedContentsToRaw(input.contents(), dtype, out);
  switch (result.error) {
    case wire::TypedConversion::Error::kNone:
      break;
    case wire::TypedConversion::Error::kOutOfRange:
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "': ", result.field, "[",
                                                     result.index, "] = ", result.value,
                                                     " is out of range"));
    case wire::TypedConversion::Error::kElementTooLong:
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "': a BYTES element exceeds 4 GiB"));
    case wire::TypedConversion::Error::kNoTypedField:
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "': ", engine::DataTypeName(dtype),
                       " has no typed contents field; send it in raw_input_contents"));
    case wire::TypedConversion::Error::kInvalidType:
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "': invalid data type"));
  }
  if (result.count != elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", name, "': shape ",
        engine::ShapeToString(std::span<const int64_t>(input.shape().data(), input.shape().size())),
        " needs ", elements, " elements but ", result.field, " holds ", result.count));
  }
  return absl::OkStatus();
}

// The value of an integer request parameter that must be >= 0 (int64_param or uint64_param).
absl::StatusOr<uint64_t> NonNegativeInteger(const inference::InferParameter& parameter,
                                            absl::string_view name) {
  switch (parameter.parameter_choice_case()) {
    case inference::InferParameter::kUint64Param:
      return parameter.uint64_param();
    case inference::InferParameter::kInt64Param:
      if (parameter.int64_param() >= 0) return static_cast<uint64_t>(parameter.int64_param());
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", name, "' is ", parameter.int64_param(), "; it must be >= 0"));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", name, "' must be an int64_param or uint64_param"));
  }
}

}  // namespace

std::optional<std::chrono::steady_clock::time_point> SteadyDeadline(
    std::chrono::system_clock::time_point grpc_deadline, std::chrono::milliseconds lead) {
  using std::chrono::steady_clock;
  using std::chrono::system_clock;
  if (grpc_deadline == system_clock::time_point::max()) return std::nullopt;
  const auto remaining = grpc_deadline - system_clock::now();
  return steady_clock::now() + std::chrono::duration_cast<steady_clock::duration>(remaining) - lead;
}

absl::StatusOr<int64_t> ParseModelVersion(const std::string& version) {
  if (version.empty()) return -1;
  int64_t parsed = 0;
  // At most 19 digits (int64): a longer string is no version, however SimpleAtoi would read it
  // (it skips whitespace).
  if (version.size() > 19 || !absl::SimpleAtoi(version, &parsed) || parsed < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model version '", common::EchoInput(version), "' is not a positive integer"));
  }
  return parsed;
}

absl::Status CheckRequestNames(const inference::ModelInferRequest& message) {
  auto too_long = [](absl::string_view what, const std::string& name, size_t limit) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", common::EchoInput(name), "' is ",
                                                   name.size(), " bytes, longer than ", limit));
  };
  if (message.model_name().size() > kMaxRequestNameBytes) {
    return too_long("model name", message.model_name(), kMaxRequestNameBytes);
  }
  if (message.id().size() > kMaxRequestIdBytes) {
    return too_long("request id", message.id(), kMaxRequestIdBytes);
  }
  for (const auto& input : message.inputs()) {
    if (input.name().size() > kMaxRequestNameBytes) {
      return too_long("input name", input.name(), kMaxRequestNameBytes);
    }
    if (input.datatype().size() > kMaxRequestNameBytes) {
      return too_long("datatype", input.datatype(), kMaxRequestNameBytes);
    }
  }
  for (const auto& output : message.outputs()) {
    if (output.name().size() > kMaxRequestNameBytes) {
      return too_long("requested output name", output.name(), kMaxRequestNameBytes);
    }
  }
  for (const auto& [key, value] : message.parameters()) {
    if (key.size() > kMaxRequestNameBytes) {
      return too_long("parameter key", key, kMaxRequestNameBytes);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<engine::InferenceRequest>> ToEngineRequest(
    const inference::ModelInferRequest& message, std::shared_ptr<const void> message_owner,
    engine::InferenceRequest::Completion on_complete) {
  if (message.model_name().empty()) {
    return absl::InvalidArgumentError("model_name is empty");
  }
  RETURN_IF_ERROR(CheckRequestNames(message));
  ASSIGN_OR_RETURN(int64_t version, ParseModelVersion(message.model_version()));
  const bool raw = message.raw_input_contents_size() > 0;
  if (raw && message.raw_input_contents_size() != message.inputs_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request has ", message.inputs_size(), " inputs but ", message.raw_input_contents_size(),
        " raw_input_contents entries; with raw inputs every input needs exactly one"));
  }

  auto storage = std::make_shared<RequestStorage>();
  storage->message = std::move(message_owner);
  storage->converted.resize(raw ? 0 : message.inputs_size());
  std::vector<engine::TensorView> inputs(message.inputs_size());
  for (int i = 0; i < message.inputs_size(); ++i) {
    const auto& input = message.inputs(i);
    engine::TensorView& view = inputs[i];
    view.name = input.name();
    view.dtype = engine::DataTypeFromName(input.datatype());
    if (view.dtype == DataType::kInvalid) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", input.name(), "': unknown datatype '", input.datatype(), "'"));
    }
    view.shape.assign(input.shape().begin(), input.shape().end());
    absl::StatusOr<int64_t> elements = engine::ElementCount(view.shape);
    if (!elements.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", input.name(), "': ", elements.status().message()));
    }
    if (raw) {
      if (HasTypedContents(input.contents())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", input.name(),
            "' has typed contents but the request uses raw_input_contents; do not mix the two"));
      }
      const std::string& bytes = message.raw_input_contents(i);
      view.data = std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()),
                                             bytes.size());
    } else {
      RETURN_IF_ERROR(ConvertTyped(input, view.dtype, *elements, storage->converted[i]));
      view.data = storage->converted[i];
    }
  }

  // Triton's scheduling parameters; other request parameters are not sluice's to judge.
  std::optional<uint64_t> priority;
  std::optional<uint64_t> timeout_us;
  if (auto it = message.parameters().find("priority"); it != message.parameters().end()) {
    ASSIGN_OR_RETURN(priority, NonNegativeInteger(it->second, "priority"));
  }
  if (auto it = message.parameters().find("timeout"); it != message.parameters().end()) {
    ASSIGN_OR_RETURN(timeout_us, NonNegativeInteger(it->second, "timeout"));
    if (*timeout_us > engine::kMaxQueueTimeoutUs) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter 'timeout' (", *timeout_us, " microseconds) is over a year"));
    }
  }

  auto request = std::make_unique<engine::InferenceRequest>(message.model_name(), version,
                                                            std::move(on_complete));
  request->id = message.id();
  if (priority.has_value()) request->priority = *priority;
  // As in Triton, a timeout of 0 asks for nothing.
  if (timeout_us.value_or(0) > 0) {
    request->timeout = std::chrono::microseconds(static_cast<int64_t>(*timeout_us));
  }
  request->inputs = std::move(inputs);
  request->requested_outputs.reserve(message.outputs_size());
  for (const auto& output : message.outputs()) {
    request->requested_outputs.push_back(output.name());
  }
  request->keepalive = std::move(storage);
  return request;
}

void ToProtoResponse(engine::InferenceResponse&& response, inference::ModelInferResponse* out) {
  out->set_model_name(std::move(response.model_name));
  out->set_model_version(absl::StrCat(response.model_version));
  out->set_id(std::move(response.id));
  for (engine::Tensor& tensor : response.outputs) {
    auto* output = out->add_outputs();
    output->set_name(std::move(tensor.name));
    output->set_datatype(std::string(engine::DataTypeName(tensor.dtype)));
    for (int64_t dim : tensor.shape) output->add_shape(dim);
    out->add_raw_output_contents()->assign(reinterpret_cast<const char*>(tensor.data.data()),
                                           tensor.data.size());
  }
}

namespace {

void FillDuration(const engine::DurationStat& from, inference::StatisticDuration* to) {
  to->set_count(from.count);
  to->set_ns(from.ns);
}

}  // namespace

inference::ModelStatisticsResponse ToStatisticsResponse(
    const std::vector<engine::Engine::VersionStats>& stats) {
  inference::ModelStatisticsResponse response;
  for (const engine::Engine::VersionStats& entry : stats) {
    const engine::ModelStatsSnapshot& s = entry.stats;
    inference::ModelStatistics* out = response.add_model_stats();
    out->set_name(entry.name);
    out->set_version(absl::StrCat(entry.version));
    out->set_last_inference(s.last_inference_ms);
    out->set_inference_count(s.inference_count);
    out->set_execution_count(s.execution_count);
    inference::InferStatistics* infer = out->mutable_inference_stats();
    FillDuration(s.success, infer->mutable_success());
    FillDuration(s.fail, infer->mutable_fail());
    FillDuration(s.queue, infer->mutable_queue());
    FillDuration(s.compute_input, infer->mutable_compute_input());
    if (s.tokenize.count > 0) FillDuration(s.tokenize, infer->mutable_tokenize());
    FillDuration(s.compute_infer, infer->mutable_compute_infer());
    FillDuration(s.compute_output, infer->mutable_compute_output());
    for (const auto& [batch_size, batch] : s.batch_stats) {
      inference::InferBatchStatistics* b = out->add_batch_stats();
      b->set_batch_size(batch_size);
      FillDuration(batch.compute_input, b->mutable_compute_input());
      FillDuration(batch.compute_infer, b->mutable_compute_infer());
      FillDuration(batch.compute_output, b->mutable_compute_output());
    }
  }
  return response;
}

}  // namespace sluice::server
