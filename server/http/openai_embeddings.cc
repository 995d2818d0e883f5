#include "server/http/openai_embeddings.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/echo.h"
#include "common/json_string.h"
#include "common/wire/bytes_elements.h"
#include "server/status_convert.h"
#include "simdjson.h"

namespace sluice::server::http::openai {
namespace {

namespace dom = simdjson::dom;

constexpr char kTextInput[] = "text";
constexpr char kIdsInput[] = "input_ids";
constexpr char kMaskInput[] = "attention_mask";
constexpr char kEmbeddingOutput[] = "embedding";
constexpr char kNumTokensOutput[] = "num_tokens";

ApiError Invalid(std::string message, std::string param) {
  ApiError error;
  error.http_status = 400;
  error.message = std::move(message);
  error.param = std::move(param);
  return error;
}

ParsedRequest Fail(ApiError error) {
  ParsedRequest parsed;
  parsed.error = std::move(error);
  return parsed;
}

// Appends `value` in shortest round-trip form (JSON has no NaN or infinity: null).
void AppendFloat(float value, std::string& out) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out.append(buffer, result.ptr);
}

// Owns what the engine request's inputs point into.
struct Storage {
  std::vector<std::byte> text;
  std::vector<std::byte> ids;
  std::vector<std::byte> mask;
};

}  // namespace

std::string ErrorBody(const ApiError& error) {
  std::string out = "{\"error\":{\"message\":";
  common::AppendJsonString(out, error.message);
  out += ",\"type\":";
  common::AppendJsonString(out, error.type);
  out += ",\"param\":";
  if (error.param.empty()) {
    out += "null";
  } else {
    common::AppendJsonString(out, error.param);
  }
  out += ",\"code\":";
  if (error.code.empty()) {
    out += "null";
  } else {
    common::AppendJsonString(out, error.code);
  }
  out += "}}";
  return out;
}

ApiError FromStatus(const absl::Status& status, absl::string_view model) {
  ApiError error;
  error.message = std::string(status.message());
  // The HTTP status is the one every route gives this status (server/status_convert.h); what is
  // OpenAI's own is the body around it.
  error.http_status = ToHttpStatusCode(status);
  if (status.code() == absl::StatusCode::kNotFound) {
    error.param = "model";
    error.code = "model_not_found";
    error.message = absl::StrCat("The model '", common::EchoInput(model), "' does not exist");
  } else if (error.http_status == 429) {
    error.type = "rate_limit_error";  // OpenAI's "too many requests" (its SDK retries with backoff)
  } else if (error.http_status >= 499) {
    error.type = "server_error";
  }
  return error;
}

ParsedRequest ParseEmbeddingsRequest(absl::string_view body, const EmbeddingsLimits& limits) {
  dom::parser parser;
  dom::element root;
  if (auto error = parser.parse(body.data(), body.size()).get(root); error) {
    return Fail(Invalid(absl::StrCat("We could not parse the JSON body of your request: ",
                                     simdjson::error_message(error)),
                        ""));
  }
  dom::object object;
  if (root.get_object().get(object) != simdjson::SUCCESS) {
    return Fail(Invalid("The request body must be a JSON object.", ""));
  }
  EmbeddingsRequest request;
  bool saw_input = false;
  for (auto field : object) {
    const std::string_view key = field.key;
    const dom::element value = field.value;
    if (key == "model") {
      std::string_view model;
      if (value.get_string().get(model) != simdjson::SUCCESS || model.empty()) {
        return Fail(Invalid("'model' must be a non-empty string.", "model"));
      }
      request.model = std::string(model);
    } else if (key == "encoding_format") {
      std::string_view format;
      if (value.get_string().get(format) != simdjson::SUCCESS ||
          (format != "float" && format != "base64")) {
        return Fail(
            Invalid("'encoding_format' must be \"float\" or \"base64\".", "encoding_format"));
      }
      request.base64 = format == "base64";
    } else if (key == "dimensions") {
      int64_t dimensions = 0;
      if (value.get_int64().get(dimensions) != simdjson::SUCCESS || dimensions < 1) {
        return Fail(Invalid("'dimensions' must be an integer >= 1.", "dimensions"));
      }
      request.dimensions = dimensions;
    } else if (key == "input") {
      saw_input = true;
      std::string_view text;
      if (value.get_string().get(text) == simdjson::SUCCESS) {  // one string
        request.texts.emplace_back(text);
        continue;
      }
      dom::array array;
      if (value.get_array().get(array) != simdjson::SUCCESS) {
        return Fail(Invalid(
            "'input' must be a string, an array of strings, an array of token ids, or an array "
            "of arrays of token ids.",
            "input"));
      }
      if (array.size() == 0) return Fail(Invalid("'input' must not be empty.", "input"));
      // An array of integers is one tokenized input; otherwise each element is one input.
      dom::element first = *array.begin();
      if (first.is_int64() || first.is_uint64()) {
        std::vector<int64_t>& ids = request.token_ids.emplace_back();
        for (dom::element id : array) {
          int64_t v = 0;
          if (id.get_int64().get(v) != simdjson::SUCCESS || v < 0) {
            return Fail(Invalid("token ids must be integers >= 0.", "input"));
          }
          ids.push_back(v);
        }
        continue;
      }
      for (dom::element item : array) {
        if (item.get_string().get(text) == simdjson::SUCCESS) {
          if (!request.token_ids.empty()) {
            return Fail(Invalid("'input' mixes strings and token arrays.", "input"));
          }
          request.texts.emplace_back(text);
          continue;
        }
        dom::array ids_array;
        if (item.get_array().get(ids_array) != simdjson::SUCCESS || !request.texts.empty()) {
          return Fail(Invalid(
              "each element of 'input' must be a string or an array of token ids, all of one "
              "kind.",
              "input"));
        }
        std::vector<int64_t>& ids = request.token_ids.emplace_back();
        for (dom::element id : ids_array) {
          int64_t v = 0;
          if (id.get_int64().get(v) != simdjson::SUCCESS || v < 0) {
            return Fail(Invalid("token ids must be integers >= 0.", "input"));
          }
          ids.push_back(v);
        }
      }
    }
    // `user` and fields OpenAI may add later are ignored, as OpenAI-compatible servers do.
  }
  if (request.model.empty()) return Fail(Invalid("you must provide a model parameter", "model"));
  if (!saw_input) return Fail(Invalid("you must provide an input parameter", "input"));
  if (request.size() > limits.max_inputs) {
    return Fail(Invalid(absl::StrCat("'input' holds ", request.size(), " inputs; at most ",
                                     limits.max_inputs, " per request."),
                        "input"));
  }
  for (size_t i = 0; i < request.texts.size(); ++i) {
    if (request.texts[i].empty()) {
      return Fail(Invalid(absl::StrCat("input[", i, "] is an empty string."), "input"));
    }
    if (request.texts[i].size() > limits.max_string_bytes) {
      return Fail(Invalid(absl::StrCat("input[", i, "] is ", request.texts[i].size(),
                                       " bytes; at most ", limits.max_string_bytes, "."),
                          "input"));
    }
  }
  for (size_t i = 0; i < request.token_ids.size(); ++i) {
    if (request.token_ids[i].empty()) {
      return Fail(Invalid(absl::StrCat("input[", i, "] is an empty token array."), "input"));
    }
    if (request.token_ids[i].size() > limits.max_tokens_per_input) {
      return Fail(Invalid(absl::StrCat("input[", i, "] has ", request.token_ids[i].size(),
                                       " tokens; at most ", limits.max_tokens_per_input, "."),
                          "input"));
    }
  }
  ParsedRequest parsed;
  parsed.request = std::move(request);
  return parsed;
}

std::unique_ptr<engine::InferenceRequest> ToInferenceRequest(
    const EmbeddingsRequest& request, TokenCounts counts,
    engine::InferenceRequest::Completion on_complete) {
  auto storage = std::make_shared<Storage>();
  auto inference = std::make_unique<engine::InferenceRequest>(request.model, /*model_version=*/-1,
                                                              std::move(on_complete));
  const int64_t n = static_cast<int64_t>(request.size());
  if (!request.texts.empty()) {
    for (const std::string& text : request.texts) wire::AppendBytesElement(storage->text, text);
    inference->inputs.push_back(
        engine::TensorView{kTextInput, engine::DataType::kBytes, {n, 1}, storage->text});
  } else {
    size_t longest = 0;
    for (const auto& ids : request.token_ids) longest = std::max(longest, ids.size());
    storage->ids.resize(static_cast<size_t>(n) * longest * sizeof(int64_t));
    storage->mask.resize(storage->ids.size());
    for (size_t row = 0; row < request.token_ids.size(); ++row) {
      const auto& ids = request.token_ids[row];
      for (size_t col = 0; col < ids.size(); ++col) {
        const size_t at = (row * longest + col) * sizeof(int64_t);
        const int64_t one = 1;
        std::memcpy(storage->ids.data() + at, &ids[col], sizeof(int64_t));
        std::memcpy(storage->mask.data() + at, &one, sizeof(int64_t));
      }
    }
    const engine::Shape shape = {n, static_cast<int64_t>(longest)};
    inference->inputs.push_back(
        engine::TensorView{kIdsInput, engine::DataType::kInt64, shape, storage->ids});
    inference->inputs.push_back(
        engine::TensorView{kMaskInput, engine::DataType::kInt64, shape, storage->mask});
  }
  inference->requested_outputs.emplace_back(kEmbeddingOutput);
  // Token ids given: their count is the usage; nothing more to ask for.
  if (!request.texts.empty() && counts == TokenCounts::kNumTokens) {
    inference->requested_outputs.emplace_back(kNumTokensOutput);
  } else if (!request.texts.empty() && counts == TokenCounts::kInputIds) {
    inference->requested_outputs.emplace_back(kIdsInput);
  }
  inference->keepalive = std::move(storage);
  return inference;
}

absl::StatusOr<std::string> ToResponseJson(const EmbeddingsRequest& request,
                                           const engine::InferenceResponse& response) {
  const engine::Tensor* embedding = nullptr;
  const engine::Tensor* num_tokens = nullptr;
  const engine::Tensor* ids = nullptr;
  for (const engine::Tensor& output : response.outputs) {
    if (output.name == kEmbeddingOutput) embedding = &output;
    if (output.name == kNumTokensOutput) num_tokens = &output;
    if (output.name == kIdsInput) ids = &output;
  }
  const int64_t n = static_cast<int64_t>(request.size());
  if (embedding == nullptr || embedding->dtype != engine::DataType::kFp32 ||
      embedding->shape.size() != 2 || embedding->shape[0] != n || embedding->shape[1] < 1 ||
      embedding->data.size() !=
          static_cast<size_t>(embedding->shape[0] * embedding->shape[1]) * sizeof(float)) {
    return absl::InternalError(absl::StrCat("model '", common::EchoInput(request.model),
                                            "' did not answer an FP32 '", kEmbeddingOutput,
                                            "' of shape [", n, ", dim]"));
  }
  const int64_t dim = embedding->shape[1];
  int64_t out_dim = dim;
  if (request.dimensions.has_value()) {
    if (*request.dimensions > dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("'dimensions' is ", *request.dimensions, " but model '",
                       common::EchoInput(request.model), "' makes embeddings of ", dim));
    }
    out_dim = *request.dimensions;
  }
  // usage.prompt_tokens: the ids given, or the model's count of the tokens it made of the text.
  int64_t prompt_tokens = 0;
  if (!request.token_ids.empty()) {
    for (const auto& ids : request.token_ids) prompt_tokens += static_cast<int64_t>(ids.size());
  } else if (num_tokens != nullptr && num_tokens->dtype == engine::DataType::kInt64 &&
             num_tokens->data.size() == static_cast<size_t>(n) * sizeof(int64_t)) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t count = 0;
      std::memcpy(&count, num_tokens->data.data() + i * sizeof(int64_t), sizeof(int64_t));
      prompt_tokens += count;
    }
  } else if (ids != nullptr && ids->dtype == engine::DataType::kInt64 && ids->shape.size() == 2 &&
             ids->shape[0] == n &&
             ids->data.size() == static_cast<size_t>(n * ids->shape[1]) * sizeof(int64_t)) {
    // Padded with 0 after each row's last token (the closing special token, never id 0).
    const int64_t seq = ids->shape[1];
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = seq; k > 0; --k) {
        int64_t id = 0;
        std::memcpy(&id, ids->data.data() + (i * seq + k - 1) * sizeof(int64_t), sizeof(int64_t));
        if (id != 0) {
          prompt_tokens += k;
          break;
        }
      }
    }
  }

  std::string out = "{\"object\":\"list\",\"data\":[";
  std::vector<float> row(static_cast<size_t>(out_dim));
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(row.data(), embedding->data.data() + i * dim * sizeof(float),
                row.size() * sizeof(float));
    if (out_dim < dim) {  // shortened: normalized again, as OpenAI's text-embedding-3 does
      double norm = 0;
      for (float v : row) norm += static_cast<double>(v) * v;
      norm = std::sqrt(norm);
      if (norm > 0) {
        for (float& v : row) v = static_cast<float>(v / norm);
      }
    }
    if (i > 0) out.push_back(',');
    out += "{\"object\":\"embedding\",\"index\":";
    out += absl::StrCat(i);
    out += ",\"embedding\":";
    if (request.base64) {
      // float32, little-endian (the layout here), as OpenAI's base64 format is.
      out.push_back('"');
      out += absl::Base64Escape(
          absl::string_view(reinterpret_cast<const char*>(row.data()), row.size() * sizeof(float)));
      out.push_back('"');
    } else {
      out.push_back('[');
      for (size_t k = 0; k < row.size(); ++k) {
        if (k > 0) out.push_back(',');
        AppendFloat(row[k], out);
      }
      out.push_back(']');
    }
    out.push_back('}');
  }
  out += "],\"model\":";
  common::AppendJsonString(out, request.model);
  out += absl::StrCat(",\"usage\":{\"prompt_tokens\":", prompt_tokens,
                      ",\"total_tokens\":", prompt_tokens, "}}");
  return out;
}

std::string ModelsListJson(const std::vector<std::string>& model_names,
                           const std::vector<std::vector<std::string>>& capabilities) {
  std::string out = "{\"object\":\"list\",\"data\":[";
  for (size_t i = 0; i < model_names.size(); ++i) {
    if (i > 0) out.push_back(',');
    out += "{\"id\":";
    common::AppendJsonString(out, model_names[i]);
    out += ",\"object\":\"model\",\"created\":0,\"owned_by\":\"sluice\"";
    if (i < capabilities.size()) {
      out += ",\"capabilities\":[";
      for (size_t c = 0; c < capabilities[i].size(); ++c) {
        if (c > 0) out.push_back(',');
        common::AppendJsonString(out, capabilities[i][c]);
      }
      out += "]";
    }
    out += "}";
  }
  out += "]}";
  return out;
}

}  // namespace sluice::server::http::openai
