#include "server/http/json_conversion.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/echo.h"
#include "common/json_string.h"
#include "common/status_macros.h"
#include "common/wire/bytes_elements.h"
#include "common/wire/float16.h"
#include "common/wire/raw_value.h"
#include "engine/model_config.h"
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

// Appends one JSON element of `dtype` (nested arrays are flattened row-major) to `out`.
absl::Status AppendElements(dom::element element, DataType dtype, absl::string_view name,
                            std::vector<std::byte>& out, int64_t& count) {
  if (element.is_array()) {
    for (dom::element child : dom::array(element)) {
      RETURN_IF_ERROR(AppendElements(child, dtype, name, out, count));
    }
    return absl::OkStatus();
  }
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("input '", name, "': data[", count, "] ", what,
                                                   " for ", engine::DataTypeName(dtype)));
  };
  auto integer = [&](auto type_tag) -> absl::Status {
    using T = decltype(type_tag);
    if constexpr (std::is_signed_v<T>) {
      int64_t v = 0;
      if (element.get_int64().get(v) != simdjson::SUCCESS) return bad("is not an integer");
      if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
        return bad(absl::StrCat("= ", v, " is out of range"));
      }
      wire::AppendRawValue(out, static_cast<T>(v));
    } else {
      uint64_t v = 0;
      if (element.get_uint64().get(v) != simdjson::SUCCESS) {
        return bad("is not a non-negative integer");
      }
      if (v > std::numeric_limits<T>::max()) return bad(absl::StrCat("= ", v, " is out of range"));
      wire::AppendRawValue(out, static_cast<T>(v));
    }
    return absl::OkStatus();
  };
  auto number = [&](double& v) -> absl::Status {
    if (element.get_double().get(v) != simdjson::SUCCESS) return bad("is not a number");
    return absl::OkStatus();
  };
  double d = 0;
  switch (dtype) {
    case DataType::kBool: {
      bool b = false;
      if (element.get_bool().get(b) != simdjson::SUCCESS) return bad("is not true or false");
      wire::AppendRawValue(out, static_cast<uint8_t>(b ? 1 : 0));
      break;
    }
    case DataType::kInt8:
      RETURN_IF_ERROR(integer(int8_t{}));
      break;
    case DataType::kInt16:
      RETURN_IF_ERROR(integer(int16_t{}));
      break;
    case DataType::kInt32:
      RETURN_IF_ERROR(integer(int32_t{}));
      break;
    case DataType::kInt64:
      RETURN_IF_ERROR(integer(int64_t{}));
      break;
    case DataType::kUint8:
      RETURN_IF_ERROR(integer(uint8_t{}));
      break;
    case DataType::kUint16:
      RETURN_IF_ERROR(integer(uint16_t{}));
      break;
    case DataType::kUint32:
      RETURN_IF_ERROR(integer(uint32_t{}));
      break;
    case DataType::kUint64:
      RETURN_IF_ERROR(integer(uint64_t{}));
      break;
    case DataType::kFp16:
      RETURN_IF_ERROR(number(d));
      wire::AppendRawValue(out, wire::FloatToHalf(static_cast<float>(d)));
      break;
    case DataType::kBf16:
      RETURN_IF_ERROR(number(d));
      wire::AppendRawValue(out, wire::FloatToBFloat16(static_cast<float>(d)));
      break;
    case DataType::kFp32:
      RETURN_IF_ERROR(number(d));
      wire::AppendRawValue(out, static_cast<float>(d));
      break;
    case DataType::kFp64:
      RETURN_IF_ERROR(number(d));
      wire::AppendRawValue(out, d);
      break;
    case DataType::kBytes: {
      std::string_view s;
      if (element.get_string().get(s) != simdjson::SUCCESS) return bad("is not a string");
      if (s.size() > std::numeric_limits<uint32_t>::max()) return bad("exceeds 4 GiB");
      wire::AppendBytesElement(out, absl::string_view(s.data(), s.size()));
      break;
    }
    case DataType::kInvalid:
      return bad("cannot be converted");
  }
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

template <typename T>
void AppendNumber(T value, std::string& out) {
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value)) {  // JSON has no NaN or infinity
      out += "null";
      return;
    }
  }
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out.append(buffer, result.ptr);
}

template <typename T>
T Load(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// The elements of `tensor` as a JSON array (flat, row-major).
void AppendData(const engine::Tensor& tensor, std::string& out) {
  out.push_back('[');
  const std::byte* p = tensor.data.data();
  const size_t size = tensor.data.size();
  bool first = true;
  auto sep = [&] {
    if (!first) out.push_back(',');
    first = false;
  };
  if (tensor.dtype == DataType::kBytes) {
    // The engine checked its outputs' framing; a malformed tail would just end the array.
    wire::BytesElementReader reader(std::span<const std::byte>(tensor.data));
    absl::string_view element;
    while (reader.Next(element)) {
      sep();
      common::AppendJsonString(out, absl::string_view(element.data(), element.size()));
    }
    out.push_back(']');
    return;
  }
  const size_t width = engine::DataTypeByteSize(tensor.dtype);
  for (size_t offset = 0; width > 0 && offset + width <= size; offset += width) {
    sep();
    switch (tensor.dtype) {
      case DataType::kBool:
        out += Load<uint8_t>(p + offset) != 0 ? "true" : "false";
        break;
      case DataType::kUint8:
        AppendNumber(Load<uint8_t>(p + offset), out);
        break;
      case DataType::kUint16:
        AppendNumber(Load<uint16_t>(p + offset), out);
        break;
      case DataType::kUint32:
        AppendNumber(Load<uint32_t>(p + offset), out);
        break;
      case DataType::kUint64:
        AppendNumber(Load<uint64_t>(p + offset), out);
        break;
      case DataType::kInt8:
        AppendNumber(Load<int8_t>(p + offset), out);
        break;
      case DataType::kInt16:
        AppendNumber(Load<int16_t>(p + offset), out);
        break;
      case DataType::kInt32:
        AppendNumber(Load<int32_t>(p + offset), out);
        break;
      case DataType::kInt64:
        AppendNumber(Load<int64_t>(p + offset), out);
        break;
      case DataType::kFp16:
        AppendNumber(wire::HalfToFloat(Load<uint16_t>(p + offset)), out);
        break;
      case DataType::kBf16:
        AppendNumber(wire::BFloat16ToFloat(Load<uint16_t>(p + offset)), out);
        break;
      case DataType::kFp32:
        AppendNumber(Load<float>(p + offset), out);
        break;
      case DataType::kFp64:
        AppendNumber(Load<double>(p + offset), out);
        break;
      case DataType::kBytes:
      case DataType::kInvalid:
        break;
    }
  }
  out.push_back(']');
}

}  // namespace

std::string ErrorJson(absl::string_view message) {
  std::string out = "{\"error\":";
  common::AppendJsonString(out, absl::string_view(message.data(), message.size()));
  out.push_back('}');
  return out;
}

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
  const std::string_view binary(text.data() + json_size, text.size() - json_size);

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
  std::vector<engine::TensorView> inputs;
  std::vector<std::string> requested_outputs;
  std::string id;
  std::optional<uint64_t> priority;
  std::optional<uint64_t> timeout_us;
  size_t binary_offset = 0;
  bool saw_inputs = false;

  for (auto field : object) {
    const std::string_view key = field.key;
    const dom::element value = field.value;
    if (key == "id") {
      std::string_view s;
      if (value.get_string().get(s) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError("request JSON: 'id' must be a string");
      }
      id = std::string(s);
    } else if (key == "parameters") {
      dom::object parameters;
      if (value.get_object().get(parameters) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError("request JSON: 'parameters' must be an object");
      }
      for (auto parameter : parameters) {
        if (parameter.key == "priority") {
          ASSIGN_OR_RETURN(priority, NonNegativeInteger(parameter.value, "priority"));
        } else if (parameter.key == "timeout") {
          ASSIGN_OR_RETURN(timeout_us, NonNegativeInteger(parameter.value, "timeout"));
          if (*timeout_us > engine::kMaxQueueTimeoutUs) {
            return absl::InvalidArgumentError(absl::StrCat("parameter 'timeout' (", *timeout_us,
                                                           " microseconds) is over a year"));
          }
        } else if (parameter.key == "binary_data_output") {
          if (parameter.value.get_bool().get(encoding->binary_default) != simdjson::SUCCESS) {
            return absl::InvalidArgumentError("parameter 'binary_data_output' must be a boolean");
          }
        }
        // Other request parameters are not sluice's to judge (as on gRPC).
      }
    } else if (key == "inputs") {
      saw_inputs = true;
      dom::array array;
      if (value.get_array().get(array) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError("request JSON: 'inputs' must be an array");
      }
      for (dom::element input : array) {
        engine::TensorView view;
        std::string_view name;
        std::string_view datatype;
        dom::array shape;
        if (input.is_object() == false || input["name"].get_string().get(name) ||
            input["datatype"].get_string().get(datatype) || input["shape"].get_array().get(shape)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "request JSON: inputs[", inputs.size(),
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
        absl::StatusOr<int64_t> elements = engine::ElementCount(view.shape);
        if (!elements.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("input '", view.name, "': ", elements.status().message()));
        }
        std::optional<uint64_t> binary_size;
        std::optional<shm::TensorRegionRef> region_ref;
        dom::element input_parameters;
        if (input["parameters"].get(input_parameters) == simdjson::SUCCESS) {
          ASSIGN_OR_RETURN(region_ref,
                           RegionRef(input_parameters, absl::StrCat("input '", view.name, "'")));
          dom::element size_element;
          if (input_parameters["binary_data_size"].get(size_element) == simdjson::SUCCESS) {
            uint64_t size = 0;
            if (size_element.get_uint64().get(size) != simdjson::SUCCESS) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "input '", view.name, "': binary_data_size must be a non-negative integer"));
            }
            binary_size = size;
          }
        }
        dom::element data;
        const bool has_data = input["data"].get(data) == simdjson::SUCCESS;
        if (region_ref.has_value()) {
          if (has_data || binary_size.has_value()) {
            return absl::InvalidArgumentError(
                absl::StrCat("input '", view.name,
                             "' is in shared memory and also has 'data' or "
                             "binary_data_size; send one of them"));
          }
          if (registry == nullptr) return NoRegistry(absl::StrCat("input '", view.name, "'"));
          RETURN_IF_ERROR(
              shm::ResolveInput(*registry, *region_ref, *elements, view, storage->regions));
        } else if (binary_size.has_value()) {
          if (has_data) {
            return absl::InvalidArgumentError(absl::StrCat(
                "input '", view.name, "' has both 'data' and binary_data_size; send one of them"));
          }
          if (*binary_size > binary.size() - binary_offset) {
            return absl::InvalidArgumentError(
                absl::StrCat("input '", view.name, "': binary_data_size ", *binary_size,
                             " at offset ", binary_offset, " runs past the ", binary.size(),
                             " bytes of binary data after the JSON header"));
          }
          view.data = std::span<const std::byte>(
              reinterpret_cast<const std::byte*>(binary.data() + binary_offset), *binary_size);
          binary_offset += *binary_size;
        } else {
          if (!has_data) {
            return absl::InvalidArgumentError(absl::StrCat(
                "input '", view.name, "' has neither 'data' nor a binary_data_size parameter"));
          }
          std::vector<std::byte>& out = storage->converted.emplace_back();
          // Reserve for the declared count, but never more than the JSON could hold (each
          // element takes at least two characters): a huge declared shape must not allocate.
          const size_t width = engine::DataTypeByteSize(view.dtype);
          const size_t most = json_size / 2 + 1;
          out.reserve(std::min(static_cast<size_t>(*elements), most) * std::max<size_t>(width, 1));
          int64_t count = 0;
          RETURN_IF_ERROR(AppendElements(data, view.dtype, view.name, out, count));
          if (count != *elements) {
            return absl::InvalidArgumentError(
                absl::StrCat("input '", view.name, "': shape ", engine::ShapeToString(view.shape),
                             " needs ", *elements, " elements but data holds ", count));
          }
          view.data = out;  // the vector's buffer does not move again
        }
        inputs.push_back(std::move(view));
      }
    } else if (key == "outputs") {
      dom::array array;
      if (value.get_array().get(array) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError("request JSON: 'outputs' must be an array");
      }
      for (dom::element output : array) {
        std::string_view name_view;
        if (output["name"].get_string().get(name_view) != simdjson::SUCCESS) {
          return absl::InvalidArgumentError(absl::StrCat(
              "request JSON: outputs[", requested_outputs.size(), "] needs a 'name' (string)"));
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
            ASSIGN_OR_RETURN(shm::OutputPlacement placement,
                             shm::ResolveOutput(*registry, *ref, name));
            encoding->shared_memory.push_back(std::move(placement));
          }
          if (parameters["classification"].error() == simdjson::SUCCESS) {
            return absl::InvalidArgumentError(
                absl::StrCat("output '", name, "': the classification extension is not supported"));
          }
        }
        requested_outputs.emplace_back(name);
      }
    }
    // Unknown top-level fields are ignored, as Triton does.
  }
  if (!saw_inputs) return absl::InvalidArgumentError("request JSON: 'inputs' is missing");
  if (binary_offset != binary.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the body holds ", binary.size(),
                     " bytes of binary data after the JSON header but the "
                     "inputs' binary_data_size add up to ",
                     binary_offset));
  }

  auto request =
      std::make_unique<engine::InferenceRequest>(model_name, version, std::move(on_complete));
  request->id = std::move(id);
  if (priority.has_value()) request->priority = *priority;
  if (timeout_us.value_or(0) > 0) {  // as in Triton, a timeout of 0 asks for nothing
    request->timeout = std::chrono::microseconds(static_cast<int64_t>(*timeout_us));
  }
  request->inputs = std::move(inputs);
  request->requested_outputs = std::move(requested_outputs);
  storage->body = std::move(body);
  request->keepalive = std::move(storage);
  return request;
}

namespace {

// `written`: per output, the bytes written into shared memory (nullopt: the output travels here).
EncodedResponse Encode(engine::InferenceResponse&& response, const OutputEncoding& encoding,
                       const std::vector<std::optional<uint64_t>>& written) {
  EncodedResponse encoded;
  std::string& out = encoded.body;
  size_t binary_bytes = 0;
  std::vector<bool> binary(response.outputs.size());
  size_t json_estimate = 128;
  for (size_t i = 0; i < response.outputs.size(); ++i) {
    const engine::Tensor& tensor = response.outputs[i];
    auto it = encoding.binary.find(tensor.name);
    binary[i] = it != encoding.binary.end() ? it->second : encoding.binary_default;
    if (written[i].has_value()) {
      binary[i] = false;
    } else if (binary[i]) {
      binary_bytes += tensor.data.size();
    } else {
      json_estimate += tensor.data.size() * 4;
    }
  }
  out.reserve(json_estimate + binary_bytes);
  out += "{\"model_name\":";
  common::AppendJsonString(out, response.model_name);
  out += ",\"model_version\":\"";
  out += absl::StrCat(response.model_version);
  out += "\"";
  if (!response.id.empty()) {
    out += ",\"id\":";
    common::AppendJsonString(out, response.id);
  }
  out += ",\"outputs\":[";
  bool any_binary = false;
  for (size_t i = 0; i < response.outputs.size(); ++i) {
    const engine::Tensor& tensor = response.outputs[i];
    if (i > 0) out.push_back(',');
    out += "{\"name\":";
    common::AppendJsonString(out, tensor.name);
    out += ",\"datatype\":\"";
    const absl::string_view dtype_name = engine::DataTypeName(tensor.dtype);
    out.append(dtype_name.data(), dtype_name.size());
    out += "\",\"shape\":[";
    for (size_t d = 0; d < tensor.shape.size(); ++d) {
      if (d > 0) out.push_back(',');
      AppendNumber(tensor.shape[d], out);
    }
    out += "]";
    if (written[i].has_value()) {
      const shm::OutputPlacement& placement =
          *shm::FindPlacement(encoding.shared_memory, tensor.name);
      out += ",\"parameters\":{\"shared_memory_region\":";
      common::AppendJsonString(out, placement.ref.region);
      out += ",\"shared_memory_byte_size\":";
      AppendNumber(*written[i], out);
      if (placement.ref.offset != 0) {
        out += ",\"shared_memory_offset\":";
        AppendNumber(placement.ref.offset, out);
      }
      out += "}}";
    } else if (binary[i]) {
      any_binary = true;
      out += ",\"parameters\":{\"binary_data_size\":";
      AppendNumber(tensor.data.size(), out);
      out += "}}";
    } else {
      out += ",\"data\":";
      AppendData(tensor, out);
      out += "}";
    }
  }
  out += "]}";
  if (any_binary) {
    encoded.header_length = out.size();
    for (size_t i = 0; i < response.outputs.size(); ++i) {
      if (!binary[i]) continue;
      const auto& data = response.outputs[i].data;
      out.append(reinterpret_cast<const char*>(data.data()), data.size());
    }
  }
  return encoded;
}

}  // namespace

EncodedResponse FromEngineResponse(engine::InferenceResponse&& response,
                                   const OutputEncoding& encoding) {
  const std::vector<std::optional<uint64_t>> none(response.outputs.size());
  return Encode(std::move(response), encoding, none);
}

absl::StatusOr<EncodedResponse> EncodeResponse(engine::InferenceResponse&& response,
                                               const OutputEncoding& encoding) {
  ASSIGN_OR_RETURN(std::vector<std::optional<uint64_t>> written,
                   shm::WriteOutputs(encoding.shared_memory, response.outputs));
  return Encode(std::move(response), encoding, written);
}

}  // namespace sluice::server::http
