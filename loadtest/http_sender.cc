#include "loadtest/http_sender.h"

#include <charconv>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace sluice::loadtest {
namespace {

template <typename T>
void AppendValues(const std::string& raw, std::string& out) {
  const size_t n = raw.size() / sizeof(T);
  char buffer[32];
  for (size_t i = 0; i < n; ++i) {
    T value;
    std::memcpy(&value, raw.data() + i * sizeof(T), sizeof(T));
    if (i > 0) out.push_back(',');
    if constexpr (std::is_same_v<T, bool>) {
      out += value ? "true" : "false";
    } else {
      const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
      out.append(buffer, result.ptr);
    }
  }
}

absl::Status AppendJsonData(const std::string& datatype, const std::string& raw, std::string& out) {
  out += "[";
  if (datatype == "FP32") {
    AppendValues<float>(raw, out);
  } else if (datatype == "FP64") {
    AppendValues<double>(raw, out);
  } else if (datatype == "INT32") {
    AppendValues<int32_t>(raw, out);
  } else if (datatype == "INT64") {
    AppendValues<int64_t>(raw, out);
  } else if (datatype == "INT16") {
    AppendValues<int16_t>(raw, out);
  } else if (datatype == "INT8") {
    AppendValues<int8_t>(raw, out);
  } else if (datatype == "UINT8") {
    AppendValues<uint8_t>(raw, out);
  } else if (datatype == "UINT16") {
    AppendValues<uint16_t>(raw, out);
  } else if (datatype == "UINT32") {
    AppendValues<uint32_t>(raw, out);
  } else if (datatype == "UINT64") {
    AppendValues<uint64_t>(raw, out);
  } else if (datatype == "BOOL") {
    AppendValues<bool>(raw, out);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--http-json has no JSON form for ", datatype, " here; use binary tensors"));
  }
  out += "]";
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HttpInferBody> BuildHttpInferBody(const inference::ModelInferRequest& request,
                                                 bool json) {
  if (request.raw_input_contents_size() != request.inputs_size()) {
    return absl::InvalidArgumentError("the HTTP body is built from raw_input_contents only");
  }
  HttpInferBody out;
  out.target = request.model_version().empty()
                   ? absl::StrCat("/v2/models/", request.model_name(), "/infer")
                   : absl::StrCat("/v2/models/", request.model_name(), "/versions/",
                                  request.model_version(), "/infer");
  std::string& text = out.body;
  text = "{";
  if (!request.id().empty())
    text += absl::StrCat("\"id\":", nlohmann::json(request.id()).dump(), ",");
  // Scheduling parameters as the gRPC request carries them (priority, timeout).
  std::string parameters = json ? "" : "\"binary_data_output\":true";
  for (const auto& [name, value] : request.parameters()) {
    if (value.parameter_choice_case() == inference::InferParameter::kUint64Param ||
        value.parameter_choice_case() == inference::InferParameter::kInt64Param) {
      if (!parameters.empty()) parameters += ",";
      parameters += absl::StrCat(nlohmann::json(name).dump(), ":",
                                 value.has_uint64_param() ? absl::StrCat(value.uint64_param())
                                                          : absl::StrCat(value.int64_param()));
    }
  }
  if (!parameters.empty()) text += "\"parameters\":{" + parameters + "},";
  text += "\"inputs\":[";
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& input = request.inputs(i);
    if (i > 0) text += ",";
    text += absl::StrCat("{\"name\":", nlohmann::json(input.name()).dump(), ",\"datatype\":\"",
                         input.datatype(), "\",\"shape\":[");
    for (int d = 0; d < input.shape_size(); ++d) {
      text += absl::StrCat(d > 0 ? "," : "", input.shape(d));
    }
    text += "]";
    if (json) {
      text += ",\"data\":";
      absl::Status status = AppendJsonData(input.datatype(), request.raw_input_contents(i), text);
      if (!status.ok()) return status;
    } else {
      text += absl::StrCat(
          ",\"parameters\":{\"binary_data_size\":", request.raw_input_contents(i).size(), "}");
    }
    text += "}";
  }
  text += "]";
  if (request.outputs_size() > 0) {
    text += ",\"outputs\":[";
    for (int i = 0; i < request.outputs_size(); ++i) {
      text += absl::StrCat(i > 0 ? "," : "",
                           "{\"name\":", nlohmann::json(request.outputs(i).name()).dump(), "}");
    }
    text += "]";
  }
  text += "}";
  if (!json) {
    out.header_length = text.size();
    for (const std::string& raw : request.raw_input_contents()) text += raw;
  }
  return out;
}

absl::StatusCode StatusCodeFromHttp(int status) {
  switch (status) {
    case 200:
      return absl::StatusCode::kOk;
    case 400:
    case 413:
      return absl::StatusCode::kInvalidArgument;
    case 404:
      return absl::StatusCode::kNotFound;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 501:
      return absl::StatusCode::kUnimplemented;
    case 503:
      return absl::StatusCode::kUnavailable;
    case 504:
      return absl::StatusCode::kDeadlineExceeded;
    default:
      return status >= 500 ? absl::StatusCode::kInternal : absl::StatusCode::kUnknown;
  }
}

HttpSender::HttpSender(std::string host, int port, std::shared_ptr<const HttpInferBody> body,
                       int timeout_ms)
    : host_(std::move(host)), port_(port), body_(std::move(body)), timeout_ms_(timeout_ms) {}

absl::Status HttpSender::Send() {
  if (connection_ == nullptr || connection_->closed()) {
    absl::StatusOr<std::unique_ptr<client::HttpConnection>> connected =
        client::HttpConnection::Connect(host_, port_, timeout_ms_);
    if (!connected.ok()) return connected.status();
    connection_ = *std::move(connected);
  }
  std::vector<std::pair<std::string, std::string>> headers;
  if (body_->header_length.has_value()) {
    headers.emplace_back("Inference-Header-Content-Length", absl::StrCat(*body_->header_length));
    headers.emplace_back("Content-Type", "application/octet-stream");
  } else {
    headers.emplace_back("Content-Type", "application/json");
  }
  absl::StatusOr<client::HttpReply> reply =
      connection_->Request("POST", body_->target, body_->body, headers);
  if (!reply.ok()) {
    connection_.reset();
    return reply.status();
  }
  if (reply->status != 200) {
    std::string message = reply->body;
    nlohmann::json parsed = nlohmann::json::parse(reply->body, nullptr, false);
    if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_string()) {
      message = parsed["error"].get<std::string>();
    }
    return absl::Status(StatusCodeFromHttp(reply->status),
                        absl::StrCat("HTTP ", reply->status, ": ", message));
  }
  if (reply->body.empty()) return absl::InternalError("HTTP 200 with an empty body");
  return absl::OkStatus();
}

}  // namespace sluice::loadtest
