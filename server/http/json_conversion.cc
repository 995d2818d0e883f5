#include "server/http/json_conversion.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/echo.h"
#include "common/status_macros.h"
#include "common/wire/bytes_elements.h"
#include "common/wire/float16.h"
#include "common/wire/raw_value.h"
#include "engine/core/model_config.h"
#include "server/infer_conversion.h"
#include "server/shared_memory/shared_memory_registry.h"
#include "simdjson.h"

namespace sluice::server::http {
namespace {

using engine::DataType;
namespace dom = simdjson::dom;

// Owns the request body (binary inputs point into it), the inputs converted from JSON, and the
// leases on the shared-memory regions inputs point into.
struct RequestStorage {
  std::shared_ptr<const std::string> body;
  std::vector<std::vector<std::byte>> converted;
  shm::RequestRegions regions;
};

// The shared-memory parameters of one tensor (`what`: "input 'x'") in its `parameters` object,
// nullopt if it names no region.
absl::StatusOr<std::optional<shm::TensorRegionRef>> RegionRef(dom::element parameters,
                                                              absl::string_view what) {
  dom::element region;
  dom::element size;
  dom::element offset;
  const bool has_region =
      parameters[std::string_view(shm::kRegionParameter.data(), shm::kRegionParameter.size())].get(
          region) == simdjson::SUCCESS;
  const bool has_size =
      parameters[std::string_view(shm::kByteSizeParameter.data(), shm::kByteSizeParameter.size())]
          .get(size) == simdjson::SUCCESS;
  const bool has_offset =
      parameters[std::string_view(shm::kOffsetParameter.data(), shm::kOffsetParameter.size())].get(
          offset) == simdjson::SUCCESS;
  if (!has_region) {
    if (has_size || has_offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": shared_memory_byte_size/shared_memory_offset without shared_memory_region"));
    }
    return std::nullopt;
  }
  shm::TensorRegionRef ref;
  std::string_view name;
  if (region.get_string().get(name) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shared_memory_region must be a string"));
  }
  ref.region = std::string(name);
  if (!has_size || size.get_uint64().get(ref.byte_size) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": shared_memory_region needs shared_memory_byte_size, a non-negative integer"));
  }
  if (has_offset && offset.get_uint64().get(ref.offset) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shared_memory_offset must be a non-negative integer"));
  }
  return ref;
}

absl::Status NoRegistry(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, " names a shared-memory region, but this endpoint has no shared memory"));
}

// One parser per I/O thread, so that simdjson reuses its buffers from one document to the next;
// but simdjson's DOM parser sizes them for the largest document it has seen (10-14x its size:
// structural indexes, tape, string buffer) and never gives them back. So its capacity is capped
// at the JSON limit, and after a document larger than kKeptParserCapacity the parser is freed:
// between requests an I/O thread keeps at most about 14 MiB.
constexpr size_t kKeptParserCapacity = size_t{1} << 20;

std::optional<dom::parser>& ThreadParserSlot() {
  thread_local std::optional<dom::parser> parser;
  return parser;
}

// The thread's parser for one document, freed at the end of the lease if it grew past
// kKeptParserCapacity. (simdjson 3.0.1's set_max_capacity() sets the wrong value, so a new cap
// means a new parser.)
class ParserLease {
 public:
  explicit ParserLease(size_t max_capacity) : slot_(ThreadParserSlot()) {
    if (!slot_.has_value() || slot_->max_capacity() != max_capacity) slot_.emplace(max_capacity);
  }
  ~ParserLease() {
    if (slot_.has_value() && slot_->capacity() > kKeptParserCapacity) slot_.reset();
  }
  ParserLease(const ParserLease&) = delete;
  ParserLease& operator=(const ParserLease&) = delete;
  dom::parser& parser() { return *slot_; }

 private:
  std::optional<dom::parser>& slot_;
};

absl::Status JsonError(absl::string_view where, simdjson::error_code error) {
  return absl::InvalidArgumentError(
      absl::StrCat("request JSON: ", where, ": ", simdjson::error_message(error)));
}

// Element `index` of input `name`'s data is not a `dtype`: `what` says how.
absl::Status BadElement(absl::string_view name, int64_t index, DataType dtype,
                        absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("input '", name, "': data[", index, "] ", what,
                                                 " for ", engine::DataTypeName(dtype)));
}

// Appends `element`, an integer that fits T, as raw T.
template <typename T>
absl::Status AppendInteger(dom::element element, DataType dtype, absl::string_view name,
                           int64_t index, std::vector<std::byte>& out) {
  if constexpr (std::is_signed_v<T>) {
    int64_t v = 0;
    if (element.get_int64().get(v) != simdjson::SUCCESS) {
      return BadElement(name, index, dtype, "is not an integer");
    }
    if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
      return BadElement(name, index, dtype, absl::StrCat("= ", v, " is out of range"));
    }
    wire::AppendRawValue(out, static_cast<T>(v));
  } else {
    uint64_t v = 0;
    if (element.get_uint64().get(v) != simdjson::SUCCESS) {
      return BadElement(name, index, dtype, "is not a non-negative integer");
    }
    if (v > std::numeric_limits<T>::max()) {
      return BadElement(name, index, dtype, absl::StrCat("= ", v, " is out of range"));
    }
    wire::AppendRawValue(out, static_cast<T>(v));
  }
  return absl::OkStatus();
}

// Appends one JSON scalar of `dtype` (element `index` of input `name`) to `out`.
absl::Status AppendScalar(dom::element element, DataType dtype, absl::string_view name,
                          int64_t index, std::vector<std::byte>& out) {
  double d = 0;
  auto number = [&]() -> absl::Status {
    if (element.get_double().get(d) != simdjson::SUCCESS) {
      return BadElement(name, index, dtype, "is not a number");
    }
    return absl::OkStatus();
  };
  switch (dtype) {
    case DataType::kBool: {
      bool b = false;
      if (element.get_bool().get(b) != simdjson::SUCCESS) {
        return BadElement(name, index, dtype, "is not true or false");
      }
      wire::AppendRawValue(out, static_cast<uint8_t>(b ? 1 : 0));
      return absl::OkStatus();
    }
    case DataType::kInt8:
      return AppendInteger<int8_t>(element, dtype, name, index, out);
    case DataType::kInt16:
      return AppendInteger<int16_t>(element, dtype, name, index, out);
    case DataType::kInt32:
      return AppendInteger<int32_t>(element, dtype, name, index, out);
    case DataType::kInt64:
      return AppendInteger<int64_t>(element, dtype, name, index, out);
    case DataType::kUint8:
      return AppendInteger<uint8_t>(element, dtype, name, index, out);
    case DataType::kUint16:
      return AppendInteger<uint16_t>(element, dtype, name, index, out);
    case DataType::kUint32:
      return AppendInteger<uint32_t>(element, dtype, name, index, out);
    case DataType::kUint64:
      return AppendInteger<uint64_t>(element, dtype, name, index, out);
    case DataType::kFp16:
      RETURN_IF_ERROR(number());
      wire::AppendRawValue(out, wire::FloatToHalf(static_cast<float>(d)));
      return absl::OkStatus();
    case DataType::kBf16:
      RETURN_IF_ERROR(number());
      wire::AppendRawValue(out, wire::FloatToBFloat16(static_cast<float>(d)));
      return absl::OkStatus();
    case DataType::kFp32:
      RETURN_IF_ERROR(number());
      wire::AppendRawValue(out, static_cast<float>(d));
      return absl::OkStatus();
    case DataType::kFp64:
      RETURN_IF_ERROR(number());
      wire::AppendRawValue(out, d);
      return absl::OkStatus();
    case DataType::kBytes: {
      std::string_view s;
      if (element.get_string().get(s) != simdjson::SUCCESS) {
        return BadElement(name, index, dtype, "is not a string");
      }
      if (s.size() > std::numeric_limits<uint32_t>::max()) {
        return BadElement(name, index, dtype, "exceeds 4 GiB");
      }
      wire::AppendBytesElement(out, absl::string_view(s.data(), s.size()));
      return absl::OkStatus();
    }
    case DataType::kInvalid:
      return BadElement(name, index, dtype, "cannot be converted");
  }
  return absl::OkStatus();
}

// Appends one JSON element of `dtype` (nested arrays are flattened row-major) to `out`.
absl::Status AppendElements(dom::element element, DataType dtype, absl::string_view name,
                            std::vector<std::byte>& out, int64_t& count) {
  if (element.is_array()) {
    for (dom::element child : dom::array(element)) {
      RETURN_IF_ERROR(AppendElements(child, dtype, name, out, count));
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(AppendScalar(element, dtype, name, count, out));
  ++count;
  return absl::OkStatus();
}

// A non-negative integer request parameter (priority, timeout).
absl::StatusOr<uint64_t> NonNegativeInteger(dom::element value, absl::string_view name) {
  uint64_t u = 0;
  if (value.get_uint64().get(u) == simdjson::SUCCESS) return u;
  int64_t i = 0;
  if (value.get_int64().get(i) == simdjson::SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", name, "' is ", i, "; it must be >= 0"));
  }
  return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' must be an integer"));
}

}  // namespace

absl::StatusOr<size_t> JsonPartSize(size_t body_bytes,
                                    const std::optional<std::string>& header_length) {
  if (!header_length.has_value()) return body_bytes;
  uint64_t parsed = 0;
  if (!absl::SimpleAtoi(*header_length, &parsed)) {
    return absl::InvalidArgumentError(absl::StrCat("Inference-Header-Content-Length '",
                                                   common::EchoInput(*header_length),
                                                   "' is not a byte count"));
  }
  if (parsed > body_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("Inference-Header-Content-Length ", parsed,
                                                   " exceeds the body's ", body_bytes, " bytes"));
  }
  return static_cast<size_t>(parsed);
}

size_t ThreadParserCapacityForTest() {
  const std::optional<dom::parser>& slot = ThreadParserSlot();
  return slot.has_value() ? slot->capacity() : 0;
}

namespace {

// What ToEngineRequest gathers from the JSON object before it builds the request.
struct ParsedRequest {
  std::string id;
  std::optional<uint64_t> priority;
  std::optional<uint64_t> timeout_us;
  engine::TextTruncation text_truncation;
  std::optional<std::string> prompt_name;
  std::vector<engine::TensorView> inputs;
  std::vector<std::string> requested_outputs;
  bool saw_inputs = false;
};

// Where the inputs' bytes come from, and what owns them.
struct InputSources {
  // The body after the JSON part (Triton's binary tensor extension), taken in input order.
  std::string_view binary;
  size_t binary_offset = 0;                             // bytes of `binary` the inputs so far took
  size_t json_size = 0;                                 // bounds what a JSON `data` array can hold
  const shm::SharedMemoryRegistry* registry = nullptr;  // nullable: shared memory is refused
  RequestStorage* storage = nullptr;  // converted JSON data and region leases (not owned)
};

// The request's `parameters` object: priority, timeout, binary_data_output, and the text
// parameters truncate, truncation_direction and max_text_pair_tokens (engine::TextTruncation)
// and prompt_name.
absl::Status ParseRequestParameters(dom::element value, ParsedRequest& parsed,
                                    OutputEncoding* encoding) {
  dom::object parameters;
  if (value.get_object().get(parameters) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("request JSON: 'parameters' must be an object");
  }
  for (auto parameter : parameters) {
    if (parameter.key == "priority") {
      ASSIGN_OR_RETURN(parsed.priority, NonNegativeInteger(parameter.value, "priority"));
    } else if (parameter.key == "timeout") {
      ASSIGN_OR_RETURN(parsed.timeout_us, NonNegativeInteger(parameter.value, "timeout"));
      if (*parsed.timeout_us > engine::kMaxQueueTimeoutUs) {
        return absl::InvalidArgumentError(absl::StrCat("parameter 'timeout' (", *parsed.timeout_us,
                                                       " microseconds) is over a year"));
      }
    } else if (parameter.key == "truncate") {
      bool truncate = false;
      if (parameter.value.get_bool().get(truncate) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError("parameter 'truncate' must be a boolean");
      }
      parsed.text_truncation.truncate = truncate;
    } else if (parameter.key == "truncation_direction") {
      std::string_view direction;
      if (parameter.value.get_string().get(direction) != simdjson::SUCCESS ||
          (direction != "Right" && direction != "Left")) {
        return absl::InvalidArgumentError(
            "parameter 'truncation_direction' must be \"Right\" or \"Left\"");
      }
      parsed.text_truncation.from_left = direction == "Left";
    } else if (parameter.key == "max_text_pair_tokens") {
      ASSIGN_OR_RETURN(uint64_t tokens,
                       NonNegativeInteger(parameter.value, "max_text_pair_tokens"));
      if (tokens > (uint64_t{1} << 30)) {
        return absl::InvalidArgumentError("parameter 'max_text_pair_tokens' is too large");
      }
      parsed.text_truncation.max_text_pair_tokens = static_cast<int64_t>(tokens);
    } else if (parameter.key == "prompt_name") {
      std::string_view name;
      if (parameter.value.get_string().get(name) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError("parameter 'prompt_name' must be a string");
      }
      parsed.prompt_name = std::string(name);
    } else if (parameter.key == "binary_data_output") {
      if (parameter.value.get_bool().get(encoding->binary_default) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError("parameter 'binary_data_output' must be a boolean");
      }
    }
    // Other request parameters are not sluice's to judge (as on gRPC).
  }
  return absl::OkStatus();
}

// An input's name, datatype and shape (`index`: its place in `inputs`), without its data.
absl::StatusOr<engine::TensorView> ParseInputHeader(dom::element input, size_t index) {
  engine::TensorView view;
  std::string_view name;
  std::string_view datatype;
  dom::array shape;
  if (input.is_object() == false || input["name"].get_string().get(name) ||
      input["datatype"].get_string().get(datatype) || input["shape"].get_array().get(shape)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request JSON: inputs[", index,
        "] needs 'name' (string), 'datatype' (string) and 'shape' (array of integers)"));
  }
  view.name = std::string(name);
  const std::string datatype_text(datatype);
  view.dtype = engine::DataTypeFromName(datatype_text);
  if (view.dtype == DataType::kInvalid) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", view.name, "': unknown datatype '", datatype_text, "'"));
  }
  for (dom::element dim : shape) {
    int64_t d = 0;
    if (dim.get_int64().get(d) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", view.name, "': shape must hold integers"));
    }
    view.shape.push_back(d);
  }
  return view;
}

// An input's `parameters`: the shared-memory region it names and its binary_data_size, if any.
struct InputPlacement {
  std::optional<uint64_t> binary_size;
  std::optional<shm::TensorRegionRef> region_ref;
};

absl::StatusOr<InputPlacement> ParseInputPlacement(dom::element input, const std::string& name) {
  InputPlacement placement;
  dom::element input_parameters;
  if (input["parameters"].get(input_parameters) == simdjson::SUCCESS) {
    ASSIGN_OR_RETURN(placement.region_ref,
                     RegionRef(input_parameters, absl::StrCat("input '", name, "'")));
    dom::element size_element;
    if (input_parameters["binary_data_size"].get(size_element) == simdjson::SUCCESS) {
      uint64_t size = 0;
      if (size_element.get_uint64().get(size) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", name, "': binary_data_size must be a non-negative integer"));
      }
      placement.binary_size = size;
    }
  }
  return placement;
}

// Points `view` at its next `binary_size` bytes of the binary part.
absl::Status TakeBinaryData(uint64_t binary_size, InputSources& sources, engine::TensorView& view) {
  if (binary_size > sources.binary.size() - sources.binary_offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", view.name, "': binary_data_size ", binary_size, " at offset ",
                     sources.binary_offset, " runs past the ", sources.binary.size(),
                     " bytes of binary data after the JSON header"));
  }
  view.data = std::span<const std::byte>(
      reinterpret_cast<const std::byte*>(sources.binary.data() + sources.binary_offset),
      binary_size);
  sources.binary_offset += binary_size;
  return absl::OkStatus();
}

// Converts the JSON `data` of `view` (`elements` declared by its shape) to raw bytes that
// `sources.storage` owns, and points `view` at them.
absl::Status ConvertJsonData(dom::element data, int64_t elements, InputSources& sources,
                             engine::TensorView& view) {
  std::vector<std::byte>& out = sources.storage->converted.emplace_back();
  // Reserve for the declared count, but never more than the JSON could hold (each
  // element takes at least two characters): a huge declared shape must not allocate.
  const size_t width = engine::DataTypeByteSize(view.dtype);
  const size_t most = sources.json_size / 2 + 1;
  out.reserve(std::min(static_cast<size_t>(elements), most) * std::max<size_t>(width, 1));
  int64_t count = 0;
  RETURN_IF_ERROR(AppendElements(data, view.dtype, view.name, out, count));
  if (count != elements) {
    return absl::InvalidArgumentError(absl::StrCat("input '", view.name, "': shape ",
                                                   engine::ShapeToString(view.shape), " needs ",
                                                   elements, " elements but data holds ", count));
  }
  view.data = out;  // the vector's buffer does not move again
  return absl::OkStatus();
}

// One element of `inputs` (`index`: its place there): its bytes come from shared memory, the
// binary part, or its JSON `data`, exactly one of them.
absl::StatusOr<engine::TensorView> ParseInput(dom::element input, size_t index,
                                              InputSources& sources) {
  ASSIGN_OR_RETURN(engine::TensorView view, ParseInputHeader(input, index));
  absl::StatusOr<int64_t> elements = engine::ElementCount(view.shape);
  if (!elements.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", view.name, "': ", elements.status().message()));
  }
  ASSIGN_OR_RETURN(const InputPlacement placement, ParseInputPlacement(input, view.name));
  dom::element data;
  const bool has_data = input["data"].get(data) == simdjson::SUCCESS;
  if (placement.region_ref.has_value()) {
    if (has_data || placement.binary_size.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("input '", view.name,
                                                     "' is in shared memory and also has 'data' or "
                                                     "binary_data_size; send one of them"));
    }
    if (sources.registry == nullptr) return NoRegistry(absl::StrCat("input '", view.name, "'"));
    RETURN_IF_ERROR(shm::ResolveInput(*sources.registry, *placement.region_ref, *elements, view,
                                      sources.storage->regions));
  } else if (placement.binary_size.has_value()) {
    if (has_data) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", view.name, "' has both 'data' and binary_data_size; send one of them"));
    }
    RETURN_IF_ERROR(TakeBinaryData(*placement.binary_size, sources, view));
  } else {
    if (!has_data) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", view.name, "' has neither 'data' nor a binary_data_size parameter"));
    }
    RETURN_IF_ERROR(ConvertJsonData(data, *elements, sources, view));
  }
  return view;
}

// The request's `inputs` array.
absl::Status ParseInputs(dom::element value, InputSources& sources, ParsedRequest& parsed) {
  parsed.saw_inputs = true;
  dom::array array;
  if (value.get_array().get(array) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("request JSON: 'inputs' must be an array");
  }
  for (dom::element input : array) {
    ASSIGN_OR_RETURN(engine::TensorView view, ParseInput(input, parsed.inputs.size(), sources));
    parsed.inputs.push_back(std::move(view));
  }
  return absl::OkStatus();
}

// One element of `outputs` (`index`: its place there): its name, and into `encoding` its
// binary_data flag and shared-memory placement.
absl::StatusOr<std::string> ParseOutput(dom::element output, size_t index,
                                        const shm::SharedMemoryRegistry* registry,
                                        OutputEncoding* encoding) {
  std::string_view name_view;
  if (output["name"].get_string().get(name_view) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat("request JSON: outputs[", index, "] needs a 'name' (string)"));
  }
  const std::string name(name_view);
  dom::element parameters;
  if (output["parameters"].get(parameters) == simdjson::SUCCESS) {
    dom::element flag;
    if (parameters["binary_data"].get(flag) == simdjson::SUCCESS) {
      bool binary_flag = false;
      if (flag.get_bool().get(binary_flag) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError(
            absl::StrCat("output '", name, "': binary_data must be a boolean"));
      }
      encoding->binary[name] = binary_flag;
    }
    ASSIGN_OR_RETURN(std::optional<shm::TensorRegionRef> ref,
                     RegionRef(parameters, absl::StrCat("output '", name, "'")));
    if (ref.has_value()) {
      if (registry == nullptr) return NoRegistry(absl::StrCat("output '", name, "'"));
      ASSIGN_OR_RETURN(shm::OutputPlacement placement, shm::ResolveOutput(*registry, *ref, name));
      encoding->shared_memory.push_back(std::move(placement));
    }
    if (parameters["classification"].error() == simdjson::SUCCESS) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", name, "': the classification extension is not supported"));
    }
  }
  return name;
}

// The request's `outputs` array.
absl::Status ParseOutputs(dom::element value, const shm::SharedMemoryRegistry* registry,
                          OutputEncoding* encoding, ParsedRequest& parsed) {
  dom::array array;
  if (value.get_array().get(array) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("request JSON: 'outputs' must be an array");
  }
  for (dom::element output : array) {
    ASSIGN_OR_RETURN(std::string name,
                     ParseOutput(output, parsed.requested_outputs.size(), registry, encoding));
    parsed.requested_outputs.push_back(std::move(name));
  }
  return absl::OkStatus();
}

// The request's top-level fields, in document order.
absl::Status ParseFields(dom::object object, InputSources& sources, OutputEncoding* encoding,
                         ParsedRequest& parsed) {
  for (auto field : object) {
    const std::string_view key = field.key;
    const dom::element value = field.value;
    if (key == "id") {
      std::string_view s;
      if (value.get_string().get(s) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError("request JSON: 'id' must be a string");
      }
      parsed.id = std::string(s);
    } else if (key == "parameters") {
      RETURN_IF_ERROR(ParseRequestParameters(value, parsed, encoding));
    } else if (key == "inputs") {
      RETURN_IF_ERROR(ParseInputs(value, sources, parsed));
    } else if (key == "outputs") {
      RETURN_IF_ERROR(ParseOutputs(value, sources.registry, encoding, parsed));
    }
    // Unknown top-level fields are ignored, as Triton does.
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<engine::InferenceRequest>> ToEngineRequest(
    const std::string& model_name, const std::string& model_version,
    std::shared_ptr<const std::string> body, const std::optional<std::string>& header_length,
    engine::InferenceRequest::Completion on_complete, OutputEncoding* encoding,
    size_t max_json_bytes, const shm::SharedMemoryRegistry* registry) {
  ASSIGN_OR_RETURN(int64_t version, ParseModelVersion(model_version));
  const std::string& text = *body;
  ASSIGN_OR_RETURN(const size_t json_size, JsonPartSize(text.size(), header_length));
  if (json_size > max_json_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the JSON part of the request is ", json_size,
                                                   " bytes; at most ", max_json_bytes,
                                                   " (--http-max-json-bytes)"));
  }

  ParserLease lease(std::max<size_t>(max_json_bytes, 1));
  dom::element root;
  if (auto error = lease.parser().parse(text.data(), json_size).get(root); error) {
    return JsonError("not valid JSON", error);
  }
  dom::object object;
  if (root.get_object().get(object) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("request JSON: the body must be a JSON object");
  }

  auto storage = std::make_shared<RequestStorage>();
  InputSources sources;
  sources.binary = std::string_view(text.data() + json_size, text.size() - json_size);
  sources.json_size = json_size;
  sources.registry = registry;
  sources.storage = storage.get();
  ParsedRequest parsed;
  RETURN_IF_ERROR(ParseFields(object, sources, encoding, parsed));
  if (!parsed.saw_inputs) return absl::InvalidArgumentError("request JSON: 'inputs' is missing");
  if (sources.binary_offset != sources.binary.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the body holds ", sources.binary.size(),
                     " bytes of binary data after the JSON header but the "
                     "inputs' binary_data_size add up to ",
                     sources.binary_offset));
  }

  auto request =
      std::make_unique<engine::InferenceRequest>(model_name, version, std::move(on_complete));
  request->id = std::move(parsed.id);
  if (parsed.priority.has_value()) request->priority = *parsed.priority;
  request->text_truncation = parsed.text_truncation;
  request->prompt_name = std::move(parsed.prompt_name);
  if (parsed.timeout_us.value_or(0) > 0) {  // as in Triton, a timeout of 0 asks for nothing
    request->timeout = std::chrono::microseconds(static_cast<int64_t>(*parsed.timeout_us));
  }
  request->inputs = std::move(parsed.inputs);
  request->requested_outputs = std::move(parsed.requested_outputs);
  storage->body = std::move(body);
  request->keepalive = std::move(storage);
  return request;
}

}  // namespace sluice::server::http
