#include "client/tensor_json.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/tensor_codec.h"
#include "common/status_macros.h"
#include "common/wire/bytes_elements.h"
#include "common/wire/float16.h"
#include "common/wire/raw_value.h"
#include "common/wire/shape.h"
#include "nlohmann/json.hpp"

namespace sluice::client {
namespace {

using json = nlohmann::ordered_json;
using wire::ShapeToString;

// ---- JSON -> raw ------------------------------------------------------------------------------

void Flatten(const json& value, std::vector<const json*>& out) {
  if (value.is_array()) {
    for (const json& element : value) Flatten(element, out);
  } else {
    out.push_back(&value);
  }
}

// Reads an integer JSON value into [lo, hi]; errors say what was wrong, without context.
absl::StatusOr<int64_t> JsonSignedInRange(const json& value, int64_t lo, int64_t hi) {
  if (value.is_number_unsigned()) {
    uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(hi)) {
      return absl::InvalidArgumentError(absl::StrCat(v, " is out of range [", lo, ", ", hi, "]"));
    }
    return static_cast<int64_t>(v);
  }
  if (!value.is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(value.dump(), " is not an integer"));
  }
  int64_t v = value.get<int64_t>();
  if (v < lo || v > hi) {
    return absl::InvalidArgumentError(absl::StrCat(v, " is out of range [", lo, ", ", hi, "]"));
  }
  return v;
}

absl::StatusOr<uint64_t> JsonUnsignedInRange(const json& value, uint64_t hi) {
  if (value.is_number_unsigned()) {
    uint64_t v = value.get<uint64_t>();
    if (v > hi) {
      return absl::InvalidArgumentError(absl::StrCat(v, " is out of range [0, ", hi, "]"));
    }
    return v;
  }
  if (value.is_number_integer()) {  // A negative integer (non-negative ones are unsigned).
    return absl::InvalidArgumentError(
        absl::StrCat(value.get<int64_t>(), " is out of range [0, ", hi, "]"));
  }
  return absl::InvalidArgumentError(absl::StrCat(value.dump(), " is not an integer"));
}

absl::StatusOr<double> JsonNumber(const json& value) {
  if (!value.is_number()) {
    return absl::InvalidArgumentError(absl::StrCat(value.dump(), " is not a number"));
  }
  return value.get<double>();
}

template <typename T>
absl::Status AppendSigned(const json& value, std::string& out) {
  ASSIGN_OR_RETURN(int64_t v, JsonSignedInRange(value, std::numeric_limits<T>::min(),
                                                std::numeric_limits<T>::max()));
  wire::AppendRawValue<T>(out, static_cast<T>(v));
  return absl::OkStatus();
}

template <typename T>
absl::Status AppendUnsigned(const json& value, std::string& out) {
  ASSIGN_OR_RETURN(uint64_t v, JsonUnsignedInRange(value, std::numeric_limits<T>::max()));
  wire::AppendRawValue<T>(out, static_cast<T>(v));
  return absl::OkStatus();
}

// Appends one JSON element as `datatype` to `out`. REQUIRES: datatype is known.
absl::Status AppendJsonElement(const json& value, absl::string_view datatype, std::string& out) {
  if (datatype == "BOOL") {
    if (value.is_boolean()) {
      out.push_back(value.get<bool>() ? 1 : 0);
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(uint64_t v, JsonUnsignedInRange(value, 1));
    out.push_back(static_cast<char>(v));
    return absl::OkStatus();
  }
  if (datatype == "INT8") return AppendSigned<int8_t>(value, out);
  if (datatype == "INT16") return AppendSigned<int16_t>(value, out);
  if (datatype == "INT32") return AppendSigned<int32_t>(value, out);
  if (datatype == "INT64") return AppendSigned<int64_t>(value, out);
  if (datatype == "UINT8") return AppendUnsigned<uint8_t>(value, out);
  if (datatype == "UINT16") return AppendUnsigned<uint16_t>(value, out);
  if (datatype == "UINT32") return AppendUnsigned<uint32_t>(value, out);
  if (datatype == "UINT64") return AppendUnsigned<uint64_t>(value, out);
  if (datatype == "BYTES") {
    if (!value.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(value.dump(), " is not a string"));
    }
    wire::AppendBytesElement(out, value.get_ref<const std::string&>());
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(double v, JsonNumber(value));
  if (datatype == "FP64") {
    wire::AppendRawValue<double>(out, v);
  } else if (datatype == "FP32") {
    wire::AppendRawValue<float>(out, static_cast<float>(v));
  } else if (datatype == "FP16") {
    wire::AppendRawValue<uint16_t>(out, FloatToHalf(static_cast<float>(v)));
  } else if (datatype == "BF16") {
    wire::AppendRawValue<uint16_t>(out, FloatToBFloat16(static_cast<float>(v)));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown datatype ", datatype));
  }
  return absl::OkStatus();
}

absl::Status CheckKnownKeys(const json& object, std::initializer_list<const char*> known,
                            absl::string_view where) {
  for (const auto& [key, unused] : object.items()) {
    bool found = false;
    for (const char* k : known) found = found || key == k;
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat("unknown field '", key, "' in ", where,
                                                     " (known: ", absl::StrJoin(known, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> JsonShape(const json& value, absl::string_view what) {
  if (!value.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": \"shape\" must be an array"));
  }
  std::vector<int64_t> shape;
  for (const json& dim : value) {
    if (!dim.is_number_integer() || dim.get<int64_t>() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": \"shape\" must hold non-negative integers, got ", value.dump()));
    }
    shape.push_back(dim.get<int64_t>());
  }
  return shape;
}

// Builds one input of InputsFromJson into `request`.
absl::Status AddJsonInput(const json& input, size_t index,
                          const inference::ModelMetadataResponse* metadata,
                          inference::ModelInferRequest& request) {
  const std::string where = absl::StrCat("inputs[", index, "]");
  if (!input.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " must be an object"));
  }
  RETURN_IF_ERROR(CheckKnownKeys(input, {"name", "datatype", "shape", "data"}, where));
  auto name_it = input.find("name");
  if (name_it == input.end() || !name_it->is_string() ||
      name_it->get_ref<const std::string&>().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " needs a \"name\" string"));
  }
  const std::string& name = name_it->get_ref<const std::string&>();
  const std::string what = absl::StrCat("input '", name, "'");

  const inference::ModelMetadataResponse::TensorMetadata* declared = nullptr;
  if (metadata != nullptr) {
    std::vector<std::string> names;
    for (const auto& tensor : metadata->inputs()) {
      if (tensor.name() == name) declared = &tensor;
      names.push_back(tensor.name());
    }
    if (declared == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", metadata->name(), "' has no input '", name,
                       "' (inputs: ", absl::StrJoin(names, ", "), ")"));
    }
  }

  std::string datatype;
  if (auto it = input.find("datatype"); it != input.end()) {
    if (!it->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": \"datatype\" must be a string"));
    }
    datatype = it->get<std::string>();
    if (declared != nullptr && datatype != declared->datatype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": datatype ", datatype, " but the model expects ", declared->datatype()));
    }
  } else if (declared != nullptr) {
    datatype = declared->datatype();
  } else {
    return absl::InvalidArgumentError(absl::StrCat(what, ": \"datatype\" is required"));
  }
  absl::StatusOr<int64_t> element_size = DataTypeSize(datatype);
  if (!element_size.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", element_size.status().message()));
  }

  std::vector<int64_t> shape;
  if (auto it = input.find("shape"); it != input.end()) {
    ASSIGN_OR_RETURN(shape, JsonShape(*it, what));
    if (declared != nullptr) {
      bool agrees = static_cast<int>(shape.size()) == declared->shape_size();
      for (size_t i = 0; agrees && i < shape.size(); ++i) {
        agrees = declared->shape(i) < 0 || declared->shape(i) == shape[i];
      }
      if (!agrees) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", ShapeToString(shape),
                                                       " does not match the model's ",
                                                       ShapeToString(declared->shape())));
      }
    }
  } else if (declared != nullptr) {
    for (int64_t dim : declared->shape()) {
      if (dim < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": \"shape\" is required (the model's shape ",
                         ShapeToString(declared->shape()), " has a variable dimension)"));
      }
    }
    shape.assign(declared->shape().begin(), declared->shape().end());
  } else {
    return absl::InvalidArgumentError(absl::StrCat(what, ": \"shape\" is required"));
  }

  auto data_it = input.find("data");
  if (data_it == input.end()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": \"data\" is required"));
  }
  std::vector<const json*> elements;
  Flatten(*data_it, elements);
  ASSIGN_OR_RETURN(int64_t count, ElementCount(shape));
  if (static_cast<int64_t>(elements.size()) != count) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", elements.size(),
                                                   " data elements for shape ",
                                                   ShapeToString(shape), " (", count, ")"));
  }
  std::string raw;
  if (*element_size > 0) raw.reserve(elements.size() * *element_size);
  for (size_t i = 0; i < elements.size(); ++i) {
    absl::Status status = AppendJsonElement(*elements[i], datatype, raw);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": data[", i, "] for ", datatype, ": ", status.message()));
    }
  }
  return AddRawInput(request, name, datatype, shape, std::move(raw));
}

// ---- raw -> JSON ------------------------------------------------------------------------------

// A float as the JSON number that prints as its shortest round-trip form (0.1f prints "0.1", not
// "0.10000000149011612"); NaN and infinities become null, as JSON has no spelling for them.
json FloatToJson(float value) {
  if (!std::isfinite(value)) return nullptr;
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  double shortest = value;
  if (ec == std::errc()) std::from_chars(buffer, end, shortest);
  return shortest;
}

json DoubleToJson(double value) {
  if (!std::isfinite(value)) return nullptr;
  return value;
}

template <typename T>
void AppendTypedJson(absl::string_view raw, json& data) {
  for (size_t pos = 0; pos + sizeof(T) <= raw.size(); pos += sizeof(T)) {
    T value;
    std::memcpy(&value, raw.data() + pos, sizeof(T));
    if constexpr (std::is_same_v<T, float>) {
      data.push_back(FloatToJson(value));
    } else if constexpr (std::is_same_v<T, double>) {
      data.push_back(DoubleToJson(value));
    } else {
      data.push_back(value);
    }
  }
}

absl::StatusOr<json> OutputDataToJson(const OutputTensor& output) {
  json data = json::array();
  const std::string& dt = output.datatype;
  const absl::string_view raw = output.raw;
  if (dt == "BOOL") {
    for (char c : raw) data.push_back(c != 0);
  } else if (dt == "INT8") {
    AppendTypedJson<int8_t>(raw, data);
  } else if (dt == "INT16") {
    AppendTypedJson<int16_t>(raw, data);
  } else if (dt == "INT32") {
    AppendTypedJson<int32_t>(raw, data);
  } else if (dt == "INT64") {
    AppendTypedJson<int64_t>(raw, data);
  } else if (dt == "UINT8") {
    AppendTypedJson<uint8_t>(raw, data);
  } else if (dt == "UINT16") {
    AppendTypedJson<uint16_t>(raw, data);
  } else if (dt == "UINT32") {
    AppendTypedJson<uint32_t>(raw, data);
  } else if (dt == "UINT64") {
    AppendTypedJson<uint64_t>(raw, data);
  } else if (dt == "FP32") {
    AppendTypedJson<float>(raw, data);
  } else if (dt == "FP64") {
    AppendTypedJson<double>(raw, data);
  } else if (dt == "FP16" || dt == "BF16") {
    for (size_t pos = 0; pos + 2 <= raw.size(); pos += 2) {
      uint16_t bits;
      std::memcpy(&bits, raw.data() + pos, 2);
      data.push_back(FloatToJson(dt == "FP16" ? HalfToFloat(bits) : BFloat16ToFloat(bits)));
    }
  } else if (dt == "BYTES") {
    ASSIGN_OR_RETURN(std::vector<std::string> elements, ParseBytesElements(raw));
    for (std::string& element : elements) data.push_back(std::move(element));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("output '", output.name, "': unknown datatype ", dt));
  }
  return data;
}

}  // namespace

absl::StatusOr<inference::ModelInferRequest> InputsFromJson(
    absl::string_view json_text, const inference::ModelMetadataResponse* metadata) {
  json document;
  // nlohmann reports parse errors only through exceptions; translate at this edge so callers see
  // a Status with the position of the error.
  try {
    document = json::parse(json_text.begin(), json_text.end());
  } catch (const json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON: ", e.what()));
  }
  if (!document.is_object()) {
    return absl::InvalidArgumentError("the JSON must be an object with an \"inputs\" array");
  }
  RETURN_IF_ERROR(CheckKnownKeys(document, {"id", "inputs", "outputs"}, "the JSON object"));
  inference::ModelInferRequest request;
  if (metadata != nullptr) request.set_model_name(metadata->name());
  if (auto it = document.find("id"); it != document.end()) {
    if (!it->is_string()) return absl::InvalidArgumentError("\"id\" must be a string");
    request.set_id(it->get<std::string>());
  }
  auto inputs = document.find("inputs");
  if (inputs == document.end() || !inputs->is_array()) {
    return absl::InvalidArgumentError("the JSON needs an \"inputs\" array");
  }
  for (size_t i = 0; i < inputs->size(); ++i) {
    RETURN_IF_ERROR(AddJsonInput((*inputs)[i], i, metadata, request));
  }
  if (auto it = document.find("outputs"); it != document.end()) {
    if (!it->is_array()) return absl::InvalidArgumentError("\"outputs\" must be an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const json& output = (*it)[i];
      const std::string where = absl::StrCat("outputs[", i, "]");
      if (!output.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(where, " must be an object"));
      }
      RETURN_IF_ERROR(CheckKnownKeys(output, {"name"}, where));
      auto name = output.find("name");
      if (name == output.end() || !name->is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(where, " needs a \"name\" string"));
      }
      AddRequestedOutput(request, name->get_ref<const std::string&>());
    }
  }
  return request;
}

// ---- Decoding responses -----------------------------------------------------------------------

absl::StatusOr<std::string> ResponseToJson(const inference::ModelInferResponse& response,
                                           int indent) {
  ASSIGN_OR_RETURN(std::vector<OutputTensor> outputs, DecodeOutputs(response));
  json document = json::object();
  document["model_name"] = response.model_name();
  document["model_version"] = response.model_version();
  document["id"] = response.id();
  json& outputs_json = document["outputs"] = json::array();
  for (const OutputTensor& output : outputs) {
    ASSIGN_OR_RETURN(json data, OutputDataToJson(output));
    outputs_json.push_back(json{{"name", output.name},
                                {"datatype", output.datatype},
                                {"shape", output.shape},
                                {"data", std::move(data)}});
  }
  // `replace`: BYTES outputs are arbitrary bytes; dump() would throw on invalid UTF-8.
  return document.dump(indent, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

}  // namespace sluice::client
