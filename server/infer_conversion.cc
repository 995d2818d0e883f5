#include "server/infer_conversion.h"

#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/echo.h"
#include "common/status_macros.h"
#include "common/wire/typed_contents.h"
#include "engine/core/model_config.h"
#include "server/shared_memory/shared_memory_registry.h"

namespace sluice::server {
namespace {

using engine::DataType;

// Owns the typed inputs converted to raw bytes, and the message the raw inputs point into, and
// the leases on the shared-memory regions inputs point into.
struct RequestStorage {
  std::shared_ptr<const void> message;
  std::vector<std::vector<std::byte>> converted;
  shm::RequestRegions regions;
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

// The shared-memory parameters of one tensor (`what`: "input 'x'"), nullopt if it names no
// region. InvalidArgument for a region without a byte size, or parameters of the wrong type.
absl::StatusOr<std::optional<shm::TensorRegionRef>> RegionRef(
    const google::protobuf::Map<std::string, inference::InferParameter>& parameters,
    absl::string_view what) {
  auto region = parameters.find(std::string(shm::kRegionParameter));
  auto size = parameters.find(std::string(shm::kByteSizeParameter));
  auto offset = parameters.find(std::string(shm::kOffsetParameter));
  if (region == parameters.end()) {
    if (size != parameters.end() || offset != parameters.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": shared_memory_byte_size/shared_memory_offset without shared_memory_region"));
    }
    return std::nullopt;
  }
  if (region->second.parameter_choice_case() != inference::InferParameter::kStringParam) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shared_memory_region must be a string_param"));
  }
  if (size == parameters.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shared_memory_region needs shared_memory_byte_size"));
  }
  shm::TensorRegionRef ref;
  ref.region = region->second.string_param();
  const std::string size_name = absl::StrCat(what, " shared_memory_byte_size");
  ASSIGN_OR_RETURN(ref.byte_size, NonNegativeInteger(size->second, size_name));
  if (offset != parameters.end()) {
    const std::string offset_name = absl::StrCat(what, " shared_memory_offset");
    ASSIGN_OR_RETURN(ref.offset, NonNegativeInteger(offset->second, offset_name));
  }
  return ref;
}

absl::Status NoRegistry(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, " names a shared-memory region, but this endpoint has no shared memory"));
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
    engine::InferenceRequest::Completion on_complete, const shm::SharedMemoryRegistry* registry,
    std::vector<shm::OutputPlacement>* output_placements) {
  if (message.model_name().empty()) {
    return absl::InvalidArgumentError("model_name is empty");
  }
  RETURN_IF_ERROR(CheckRequestNames(message));
  ASSIGN_OR_RETURN(int64_t version, ParseModelVersion(message.model_version()));
  // Inputs in shared memory have no raw_input_contents entry (tritonclient and perf_analyzer
  // send one only for the others, in order).
  std::vector<std::optional<shm::TensorRegionRef>> region_refs(message.inputs_size());
  int inline_inputs = 0;
  for (int i = 0; i < message.inputs_size(); ++i) {
    const auto& input = message.inputs(i);
    ASSIGN_OR_RETURN(region_refs[i],
                     RegionRef(input.parameters(), absl::StrCat("input '", input.name(), "'")));
    if (!region_refs[i].has_value()) ++inline_inputs;
  }
  const bool raw = message.raw_input_contents_size() > 0;
  if (raw && message.raw_input_contents_size() != inline_inputs) {
    if (inline_inputs == message.inputs_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "request has ", message.inputs_size(), " inputs but ", message.raw_input_contents_size(),
          " raw_input_contents entries; with raw inputs every input needs exactly one"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "request has ", inline_inputs, " inputs not in shared memory but ",
        message.raw_input_contents_size(),
        " raw_input_contents entries; with raw inputs each of them needs exactly one"));
  }

  auto storage = std::make_shared<RequestStorage>();
  storage->message = std::move(message_owner);
  storage->converted.resize(raw ? 0 : message.inputs_size());
  std::vector<engine::TensorView> inputs(message.inputs_size());
  int raw_index = 0;
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
    if (region_refs[i].has_value()) {
      if (HasTypedContents(input.contents())) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", input.name(),
                         "' is in shared memory and also has typed contents; send one of them"));
      }
      if (registry == nullptr) return NoRegistry(absl::StrCat("input '", input.name(), "'"));
      RETURN_IF_ERROR(
          shm::ResolveInput(*registry, *region_refs[i], *elements, view, storage->regions));
    } else if (raw) {
      if (HasTypedContents(input.contents())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", input.name(),
            "' has typed contents but the request uses raw_input_contents; do not mix the two"));
      }
      const std::string& bytes = message.raw_input_contents(raw_index++);
      view.data = std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()),
                                             bytes.size());
    } else {
      RETURN_IF_ERROR(ConvertTyped(input, view.dtype, *elements, storage->converted[i]));
      view.data = storage->converted[i];
    }
  }
  for (const auto& output : message.outputs()) {
    const std::string what = absl::StrCat("output '", output.name(), "'");
    ASSIGN_OR_RETURN(std::optional<shm::TensorRegionRef> ref, RegionRef(output.parameters(), what));
    if (!ref.has_value()) continue;
    if (registry == nullptr || output_placements == nullptr) return NoRegistry(what);
    ASSIGN_OR_RETURN(shm::OutputPlacement placement,
                     shm::ResolveOutput(*registry, *ref, output.name()));
    output_placements->push_back(std::move(placement));
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

  // The text parameters (engine::TextTruncation), for models that tokenize.
  engine::TextTruncation text_truncation;
  if (auto it = message.parameters().find("truncate"); it != message.parameters().end()) {
    if (it->second.parameter_choice_case() != inference::InferParameter::kBoolParam) {
      return absl::InvalidArgumentError("parameter 'truncate' must be a bool_param");
    }
    text_truncation.truncate = it->second.bool_param();
  }
  if (auto it = message.parameters().find("truncation_direction");
      it != message.parameters().end()) {
    const std::string* direction =
        it->second.parameter_choice_case() == inference::InferParameter::kStringParam
            ? &it->second.string_param()
            : nullptr;
    if (direction == nullptr || (*direction != "Right" && *direction != "Left")) {
      return absl::InvalidArgumentError(
          "parameter 'truncation_direction' must be the string_param \"Right\" or \"Left\"");
    }
    text_truncation.from_left = *direction == "Left";
  }
  if (auto it = message.parameters().find("max_text_pair_tokens");
      it != message.parameters().end()) {
    ASSIGN_OR_RETURN(uint64_t tokens, NonNegativeInteger(it->second, "max_text_pair_tokens"));
    if (tokens > (uint64_t{1} << 30)) {
      return absl::InvalidArgumentError("parameter 'max_text_pair_tokens' is too large");
    }
    text_truncation.max_text_pair_tokens = static_cast<int64_t>(tokens);
  }

  std::optional<std::string> prompt_name;
  if (auto it = message.parameters().find("prompt_name"); it != message.parameters().end()) {
    if (it->second.parameter_choice_case() != inference::InferParameter::kStringParam) {
      return absl::InvalidArgumentError("parameter 'prompt_name' must be a string_param");
    }
    prompt_name = it->second.string_param();
  }

  auto request = std::make_unique<engine::InferenceRequest>(message.model_name(), version,
                                                            std::move(on_complete));
  request->id = message.id();
  if (priority.has_value()) request->priority = *priority;
  request->text_truncation = text_truncation;
  request->prompt_name = std::move(prompt_name);
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

absl::Status ToProtoResponse(engine::InferenceResponse&& response,
                             const std::vector<shm::OutputPlacement>& placements,
                             inference::ModelInferResponse* out) {
  if (placements.empty()) {
    ToProtoResponse(std::move(response), out);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::vector<std::optional<uint64_t>> written,
                   shm::WriteOutputs(placements, response.outputs));
  bool any_inline = false;
  for (const auto& w : written) any_inline = any_inline || !w.has_value();
  out->set_model_name(std::move(response.model_name));
  out->set_model_version(absl::StrCat(response.model_version));
  out->set_id(std::move(response.id));
  for (size_t i = 0; i < response.outputs.size(); ++i) {
    engine::Tensor& tensor = response.outputs[i];
    auto* output = out->add_outputs();
    output->set_name(tensor.name);
    output->set_datatype(std::string(engine::DataTypeName(tensor.dtype)));
    for (int64_t dim : tensor.shape) output->add_shape(dim);
    if (written[i].has_value()) {
      const shm::OutputPlacement& placement = *shm::FindPlacement(placements, tensor.name);
      auto& parameters = *output->mutable_parameters();
      parameters[std::string(shm::kRegionParameter)].set_string_param(placement.ref.region);
      parameters[std::string(shm::kByteSizeParameter)].set_int64_param(
          static_cast<int64_t>(*written[i]));
      if (placement.ref.offset != 0) {
        parameters[std::string(shm::kOffsetParameter)].set_int64_param(
            static_cast<int64_t>(placement.ref.offset));
      }
      // Keeps raw_output_contents indexed like outputs for clients that read both.
      if (any_inline) out->add_raw_output_contents();
    } else {
      out->add_raw_output_contents()->assign(reinterpret_cast<const char*>(tensor.data.data()),
                                             tensor.data.size());
    }
  }
  return absl::OkStatus();
}

namespace {

void FillDuration(const engine::DurationStat& from, inference::StatisticDuration* to) {
  to->set_count(from.count);
  to->set_ns(from.ns);
}

}  // namespace

namespace {

void AddModelEntry(const engine::Engine::VersionStats& entry,
                   inference::ModelStatisticsResponse& response) {
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
  FillDuration(s.compute_infer, infer->mutable_compute_infer());
  FillDuration(s.compute_output, infer->mutable_compute_output());
  // Triton's response cache counts: sluice has no response cache, so they are zero, but present,
  // since Triton's clients and dashboards read them.
  FillDuration({}, infer->mutable_cache_hit());
  FillDuration({}, infer->mutable_cache_miss());
  for (const auto& [batch_size, batch] : s.batch_stats) {
    inference::InferBatchStatistics* b = out->add_batch_stats();
    b->set_batch_size(batch_size);
    FillDuration(batch.compute_input, b->mutable_compute_input());
    FillDuration(batch.compute_infer, b->mutable_compute_infer());
    FillDuration(batch.compute_output, b->mutable_compute_output());
  }
}

// The tokenizer's entry. Tokenization reads the text and writes the ids in one pass: it is all
// compute_infer; compute_input and compute_output are present with zero counts (clients index
// every phase, as Triton always prints them).
void AddTokenizerEntry(const engine::Engine::VersionStats& entry,
                       inference::ModelStatisticsResponse& response) {
  const engine::PreparationStats& s = entry.stats.preparation;
  inference::ModelStatistics* out = response.add_model_stats();
  out->set_name(absl::StrCat(entry.name, kTokenizerStatsSuffix));
  out->set_version(absl::StrCat(entry.version));
  out->set_last_inference(s.last_prepared_ms);
  out->set_inference_count(s.items);
  out->set_execution_count(s.jobs);
  inference::InferStatistics* infer = out->mutable_inference_stats();
  FillDuration(s.success, infer->mutable_success());
  FillDuration(s.fail, infer->mutable_fail());
  FillDuration(s.queue, infer->mutable_queue());
  FillDuration({}, infer->mutable_compute_input());
  FillDuration(s.compute, infer->mutable_compute_infer());
  FillDuration({}, infer->mutable_compute_output());
  FillDuration({}, infer->mutable_cache_hit());
  FillDuration({}, infer->mutable_cache_miss());
  for (const auto& [items, compute] : s.compute_by_items) {
    inference::InferBatchStatistics* b = out->add_batch_stats();
    b->set_batch_size(items);
    FillDuration({}, b->mutable_compute_input());
    FillDuration(compute, b->mutable_compute_infer());
    FillDuration({}, b->mutable_compute_output());
  }
}

}  // namespace

inference::ModelStatisticsResponse ToStatisticsResponse(
    const std::vector<engine::Engine::VersionStats>& stats) {
  inference::ModelStatisticsResponse response;
  for (const engine::Engine::VersionStats& entry : stats) {
    AddModelEntry(entry, response);
    if (entry.stats.prepares) AddTokenizerEntry(entry, response);
  }
  return response;
}

absl::StatusOr<inference::ModelStatisticsResponse> StatisticsResponse(const engine::Engine& engine,
                                                                      const std::string& name,
                                                                      int64_t version) {
  const absl::string_view view(name);
  if (!absl::EndsWith(view, kTokenizerStatsSuffix)) {
    ASSIGN_OR_RETURN(std::vector<engine::Engine::VersionStats> stats,
                     engine.GetStats(name, version));
    return ToStatisticsResponse(stats);
  }
  const std::string model(view.substr(0, view.size() - kTokenizerStatsSuffix.size()));
  absl::StatusOr<std::vector<engine::Engine::VersionStats>> stats =
      model.empty() ? absl::NotFoundError("no model name") : engine.GetStats(model, version);
  inference::ModelStatisticsResponse response;
  if (stats.ok()) {
    for (const engine::Engine::VersionStats& entry : *stats) {
      if (entry.stats.prepares) AddTokenizerEntry(entry, response);
    }
  }
  if (response.model_stats().empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no statistics for '", common::EchoInput(name), "'",
        version < 0 ? "" : absl::StrCat(" version ", version), ": '", common::EchoInput(model),
        "' is not a loaded model with a tokenizer (a tokenizer.json or vocab.txt in its version "
        "folder)"));
  }
  return response;
}

}  // namespace sluice::server
