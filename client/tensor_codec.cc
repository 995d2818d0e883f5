#include "client/tensor_codec.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace sluice::client {
namespace {

using json = nlohmann::ordered_json;

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

// splitmix64: a tiny, fully specified generator, so RandomInput gives the same bytes everywhere
// (the distributions of <random> are implementation-defined).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1), from the top 24 bits (exactly representable as float).
  float NextUnitFloat() {
    return static_cast<float>(Next() >> 40) / static_cast<float>(1 << 23) - 1.0f;
  }

 private:
  uint64_t state_;
};

template <typename T>
void AppendValue(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void AppendBytesElement(std::string& out, absl::string_view element) {
  AppendValue<uint32_t>(out, static_cast<uint32_t>(element.size()));
  out.append(element.data(), element.size());
}

// Counts the elements of a serialized BYTES tensor, checking its framing.
absl::StatusOr<int64_t> CountBytesElements(absl::string_view raw) {
  int64_t count = 0;
  size_t pos = 0;
  while (pos < raw.size()) {
    if (raw.size() - pos < 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("BYTES data ends inside the length prefix of element ", count));
    }
    uint32_t length;
    std::memcpy(&length, raw.data() + pos, 4);
    pos += 4;
    if (raw.size() - pos < length) {
      return absl::InvalidArgumentError(absl::StrCat("BYTES element ", count, " declares ", length,
                                                     " bytes but only ", raw.size() - pos,
                                                     " remain"));
    }
    pos += length;
    ++count;
  }
  return count;
}

// Checks that `raw` holds exactly a tensor of `datatype` and `shape`; `what` names it in errors
// ("input 'INPUT0'").
absl::Status CheckRawSize(absl::string_view what, absl::string_view datatype,
                          absl::Span<const int64_t> shape, absl::string_view raw) {
  absl::StatusOr<int64_t> element_size = DataTypeSize(datatype);
  if (!element_size.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", element_size.status().message()));
  }
  absl::StatusOr<int64_t> count = ElementCount(shape);
  if (!count.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shape ", ShapeString(shape), ": ", count.status().message()));
  }
  if (*element_size == 0) {
    absl::StatusOr<int64_t> actual = CountBytesElements(raw);
    if (!actual.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", actual.status().message()));
    }
    if (*actual != *count) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", *actual,
                                                     " BYTES elements for shape ",
                                                     ShapeString(shape), " (", *count, ")"));
    }
    return absl::OkStatus();
  }
  // count * size cannot overflow in practice for data that fits in memory, but check anyway.
  int64_t expected;
  if (__builtin_mul_overflow(*count, *element_size, &expected)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": byte size of shape ", ShapeString(shape), " overflows"));
  }
  if (static_cast<int64_t>(raw.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", raw.size(), " bytes for ", datatype,
                                                   " shape ", ShapeString(shape), " (expected ",
                                                   expected, ")"));
  }
  return absl::OkStatus();
}

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
  AppendValue<T>(out, static_cast<T>(v));
  return absl::OkStatus();
}

template <typename T>
absl::Status AppendUnsigned(const json& value, std::string& out) {
  ASSIGN_OR_RETURN(uint64_t v, JsonUnsignedInRange(value, std::numeric_limits<T>::max()));
  AppendValue<T>(out, static_cast<T>(v));
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
    AppendBytesElement(out, value.get_ref<const std::string&>());
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(double v, JsonNumber(value));
  if (datatype == "FP64") {
    AppendValue<double>(out, v);
  } else if (datatype == "FP32") {
    AppendValue<float>(out, static_cast<float>(v));
  } else if (datatype == "FP16") {
    AppendValue<uint16_t>(out, FloatToHalf(static_cast<float>(v)));
  } else if (datatype == "BF16") {
    AppendValue<uint16_t>(out, FloatToBFloat16(static_cast<float>(v)));
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
        return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", ShapeString(shape),
                                                       " does not match the model's ",
                                                       ShapeString(declared->shape())));
      }
    }
  } else if (declared != nullptr) {
    for (int64_t dim : declared->shape()) {
      if (dim < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": \"shape\" is required (the model's shape ",
                         ShapeString(declared->shape()), " has a variable dimension)"));
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
                                                   " data elements for shape ", ShapeString(shape),
                                                   " (", count, ")"));
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

// ---- typed contents -> raw --------------------------------------------------------------------

template <typename T, typename Repeated>
absl::Status NarrowInto(const Repeated& values, absl::string_view what, std::string& out) {
  for (auto v : values) {
    if (!std::in_range<T>(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": typed value ", v, " does not fit the datatype"));
    }
    AppendValue<T>(out, static_cast<T>(v));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TypedContentsToRaw(const inference::InferTensorContents& contents,
                                               absl::string_view datatype, absl::string_view what) {
  std::string raw;
  absl::Status status;
  if (datatype == "BOOL") {
    for (bool b : contents.bool_contents()) raw.push_back(b ? 1 : 0);
  } else if (datatype == "INT8") {
    status = NarrowInto<int8_t>(contents.int_contents(), what, raw);
  } else if (datatype == "INT16") {
    status = NarrowInto<int16_t>(contents.int_contents(), what, raw);
  } else if (datatype == "INT32") {
    status = NarrowInto<int32_t>(contents.int_contents(), what, raw);
  } else if (datatype == "INT64") {
    status = NarrowInto<int64_t>(contents.int64_contents(), what, raw);
  } else if (datatype == "UINT8") {
    status = NarrowInto<uint8_t>(contents.uint_contents(), what, raw);
  } else if (datatype == "UINT16") {
    status = NarrowInto<uint16_t>(contents.uint_contents(), what, raw);
  } else if (datatype == "UINT32") {
    status = NarrowInto<uint32_t>(contents.uint_contents(), what, raw);
  } else if (datatype == "UINT64") {
    status = NarrowInto<uint64_t>(contents.uint64_contents(), what, raw);
  } else if (datatype == "FP32") {
    raw = ToRawBytes<float>(contents.fp32_contents());
  } else if (datatype == "FP64") {
    raw = ToRawBytes<double>(contents.fp64_contents());
  } else if (datatype == "BYTES") {
    for (const std::string& element : contents.bytes_contents()) {
      AppendBytesElement(raw, element);
    }
  } else if (datatype == "FP16" || datatype == "BF16") {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", datatype, " has no typed contents; it must come raw"));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(what, ": unknown datatype ", datatype));
  }
  RETURN_IF_ERROR(status);
  return raw;
}

absl::StatusOr<OutputTensor> DecodeOutputAt(const inference::ModelInferResponse& response,
                                            int index) {
  const auto& tensor = response.outputs(index);
  OutputTensor output;
  output.name = tensor.name();
  output.datatype = tensor.datatype();
  output.shape.assign(tensor.shape().begin(), tensor.shape().end());
  const std::string what = absl::StrCat("output '", tensor.name(), "'");
  if (response.raw_output_contents_size() > 0) {
    if (response.raw_output_contents_size() != response.outputs_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("response has ", response.raw_output_contents_size(),
                       " raw_output_contents for ", response.outputs_size(), " outputs"));
    }
    output.raw = response.raw_output_contents(index);
  } else {
    ASSIGN_OR_RETURN(output.raw, TypedContentsToRaw(tensor.contents(), tensor.datatype(), what));
  }
  RETURN_IF_ERROR(CheckRawSize(what, output.datatype, output.shape, output.raw));
  return output;
}

}  // namespace

// ---- Data types -------------------------------------------------------------------------------

absl::StatusOr<int64_t> DataTypeSize(absl::string_view datatype) {
  if (datatype == "BOOL" || datatype == "INT8" || datatype == "UINT8") return 1;
  if (datatype == "INT16" || datatype == "UINT16" || datatype == "FP16" || datatype == "BF16") {
    return 2;
  }
  if (datatype == "INT32" || datatype == "UINT32" || datatype == "FP32") return 4;
  if (datatype == "INT64" || datatype == "UINT64" || datatype == "FP64") return 8;
  if (datatype == "BYTES") return 0;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown datatype '", datatype,
      "' (known: BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, BF16, "
      "FP32, FP64, BYTES)"));
}

absl::StatusOr<int64_t> ElementCount(absl::Span<const int64_t> shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("dimension ", dim, " is negative; give a concrete size"));
    }
    if (__builtin_mul_overflow(count, dim, &count)) {
      return absl::InvalidArgumentError("element count overflows int64");
    }
  }
  return count;
}

uint16_t FloatToHalf(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t exponent = (x >> 23) & 0xff;
  uint32_t mantissa = x & 0x7fffff;
  if (exponent == 0xff) {  // Inf stays Inf; NaN keeps a set quiet bit so it stays NaN.
    return sign | 0x7c00 | (mantissa != 0 ? 0x200 | (mantissa >> 13) : 0);
  }
  const int32_t half_exponent = static_cast<int32_t>(exponent) - 127 + 15;
  if (half_exponent >= 0x1f) return sign | 0x7c00;  // Too large: Inf.
  if (half_exponent <= 0) {
    // Subnormal half (or zero): value = h * 2^-24, so h = (1.mantissa) * 2^(exponent - 126).
    if (half_exponent < -10) return sign;  // Below half the smallest subnormal: +-0.
    mantissa |= 0x800000;
    const int shift = 14 - half_exponent;
    uint32_t h = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (h & 1))) ++h;  // May round up to the min normal.
    return sign | static_cast<uint16_t>(h);
  }
  uint32_t h = (static_cast<uint32_t>(half_exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // A carry into the exponent is right.
  return sign | static_cast<uint16_t>(h);
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1f;
  const uint32_t mantissa = bits & 0x3ff;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000 | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

uint16_t FloatToBFloat16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) return static_cast<uint16_t>((x >> 16) | 0x40);
  return static_cast<uint16_t>((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

float BFloat16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// ---- Raw bytes --------------------------------------------------------------------------------

std::string SerializeBytesElements(absl::Span<const std::string> elements) {
  size_t total = 0;
  for (const std::string& element : elements) total += 4 + element.size();
  std::string raw;
  raw.reserve(total);
  for (const std::string& element : elements) AppendBytesElement(raw, element);
  return raw;
}

absl::StatusOr<std::vector<std::string>> ParseBytesElements(absl::string_view raw) {
  RETURN_IF_ERROR(CountBytesElements(raw).status());
  std::vector<std::string> elements;
  size_t pos = 0;
  while (pos < raw.size()) {
    uint32_t length;
    std::memcpy(&length, raw.data() + pos, 4);
    pos += 4;
    elements.emplace_back(raw.substr(pos, length));
    pos += length;
  }
  return elements;
}

// ---- Building requests ------------------------------------------------------------------------

absl::Status AddRawInput(inference::ModelInferRequest& request, absl::string_view name,
                         absl::string_view datatype, absl::Span<const int64_t> shape,
                         std::string raw) {
  const std::string what = absl::StrCat("input '", name, "'");
  if (name.empty()) return absl::InvalidArgumentError("input name is empty");
  if (request.raw_input_contents_size() != request.inputs_size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot add raw ", what, ": the request has typed (contents) inputs"));
  }
  for (const auto& input : request.inputs()) {
    if (input.name() == name) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot add ", what, ": the request already has it"));
    }
  }
  RETURN_IF_ERROR(CheckRawSize(what, datatype, shape, raw));
  auto* input = request.add_inputs();
  input->set_name(std::string(name));
  input->set_datatype(std::string(datatype));
  input->mutable_shape()->Add(shape.begin(), shape.end());
  *request.add_raw_input_contents() = std::move(raw);
  return absl::OkStatus();
}

absl::Status AddBytesInput(inference::ModelInferRequest& request, absl::string_view name,
                           absl::Span<const int64_t> shape,
                           absl::Span<const std::string> elements) {
  return AddRawInput(request, name, "BYTES", shape, SerializeBytesElements(elements));
}

void AddRequestedOutput(inference::ModelInferRequest& request, absl::string_view name) {
  request.add_outputs()->set_name(std::string(name));
}

absl::StatusOr<std::string> RandomInput(absl::string_view datatype, absl::Span<const int64_t> shape,
                                        uint64_t seed) {
  ASSIGN_OR_RETURN(int64_t element_size, DataTypeSize(datatype));
  absl::StatusOr<int64_t> count = ElementCount(shape);
  if (!count.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "random ", datatype, " shape ", ShapeString(shape), ": ", count.status().message()));
  }
  SplitMix64 rng(seed);
  std::string raw;
  raw.reserve(element_size > 0 ? *count * element_size : *count * 7);
  for (int64_t i = 0; i < *count; ++i) {
    const uint64_t bits = rng.Next();
    if (datatype == "BOOL") {
      raw.push_back(static_cast<char>(bits & 1));
    } else if (datatype == "BYTES") {
      AppendBytesElement(raw, absl::StrCat(bits % 1000));
    } else if (datatype == "FP32") {
      AppendValue<float>(raw, rng.NextUnitFloat());
    } else if (datatype == "FP64") {
      AppendValue<double>(raw, rng.NextUnitFloat());
    } else if (datatype == "FP16") {
      AppendValue<uint16_t>(raw, FloatToHalf(rng.NextUnitFloat()));
    } else if (datatype == "BF16") {
      AppendValue<uint16_t>(raw, FloatToBFloat16(rng.NextUnitFloat()));
    } else {
      // Integers: small values, so sums and products of a few stay in range for every width.
      const bool is_signed = datatype[0] == 'I';
      const int64_t v =
          is_signed ? static_cast<int64_t>(bits % 64) - 32 : static_cast<int64_t>(bits % 64);
      // Little-endian: the low `element_size` bytes of the two's complement value.
      char bytes[8];
      std::memcpy(bytes, &v, 8);
      raw.append(bytes, element_size);
    }
  }
  return raw;
}

absl::StatusOr<inference::ModelInferRequest> MakeRandomRequest(
    const inference::ModelMetadataResponse& metadata, int64_t batch_size, uint64_t seed) {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch size ", batch_size, " is not >= 1"));
  }
  inference::ModelInferRequest request;
  request.set_model_name(metadata.name());
  for (int i = 0; i < metadata.inputs_size(); ++i) {
    const auto& tensor = metadata.inputs(i);
    std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] < 0) shape[d] = d == 0 ? batch_size : 1;
    }
    absl::StatusOr<std::string> raw = RandomInput(tensor.datatype(), shape, seed + i);
    if (!raw.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", tensor.name(), "': ", raw.status().message()));
    }
    RETURN_IF_ERROR(AddRawInput(request, tensor.name(), tensor.datatype(), shape, *std::move(raw)));
  }
  return request;
}

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

absl::StatusOr<OutputTensor> DecodeOutput(const inference::ModelInferResponse& response,
                                          absl::string_view name) {
  for (int i = 0; i < response.outputs_size(); ++i) {
    if (response.outputs(i).name() == name) return DecodeOutputAt(response, i);
  }
  std::vector<std::string> names;
  for (const auto& output : response.outputs()) names.push_back(output.name());
  return absl::NotFoundError(absl::StrCat("response has no output '", name,
                                          "' (outputs: ", absl::StrJoin(names, ", "), ")"));
}

absl::StatusOr<std::vector<OutputTensor>> DecodeOutputs(
    const inference::ModelInferResponse& response) {
  std::vector<OutputTensor> outputs;
  outputs.reserve(response.outputs_size());
  for (int i = 0; i < response.outputs_size(); ++i) {
    ASSIGN_OR_RETURN(OutputTensor output, DecodeOutputAt(response, i));
    outputs.push_back(std::move(output));
  }
  return outputs;
}

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
