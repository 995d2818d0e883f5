// The engine-to-JSON half of json_conversion.h: a response's outputs as JSON `data`, as Triton's
// binary tensor extension after the JSON, or written into the client's shared memory; and the
// protocol's error body. (json_conversion.cc is the request half.)

#include <charconv>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_string.h"
#include "common/status_macros.h"
#include "common/wire/bytes_elements.h"
#include "common/wire/float16.h"
#include "engine/core/tensor.h"
#include "server/http/json_conversion.h"
#include "server/shared_memory/tensor_placement.h"

namespace sluice::server::http {
namespace {

using engine::DataType;

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
