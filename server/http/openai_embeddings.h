#pragma once

// The conversion layer of the OpenAI-compatible embeddings API (issue 21, second half): OpenAI's
// `POST /v1/embeddings` JSON <-> an engine InferenceRequest for an encoder model, and the
// `GET /v1/models` list. Pure functions; the routes that use them are HttpRoutes' OpenAi() and
// Embeddings() (openai_routes.cc), tested with the official SDK (tests/integration/
// openai_sdk_test.py).
//
// The encoder model contract this layer assumes (the encoder's config must match it):
//   inputs   `text` BYTES [n, 1]                 when the request gives strings (the model
//                                               tokenizes), or
//            `input_ids` INT64 [n, L] and `attention_mask` INT64 [n, L]
//                                               when it gives token-id arrays (padded with 0 to
//                                               the longest, mask 1 for real tokens);
//   outputs  `embedding` FP32 [n, dim]           (requested by name), and optionally
//            `num_tokens` INT64 [n] or [n, 1]    (tokens per input after tokenization; used for
//                                               usage.prompt_tokens of string inputs), or
//            `input_ids` INT64 [n, seq]          (the ids each row ran with, padded with 0, as the
//                                               encoder with a tokenizer answers, issue 20: a
//                                               row's count runs to its last non-zero id, which
//                                               is the tokenizer's closing special token).
//
// Errors are OpenAI's shape: {"error": {"message", "type", "param", "code"}}.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/inference_request.h"

namespace sluice::server::http::openai {

struct EmbeddingsLimits {
  // OpenAI's own bounds for its embedding models: 2,048 inputs per request, 8,192 tokens each.
  size_t max_inputs = 2048;
  size_t max_tokens_per_input = 8192;
  // A string input, in bytes (the model's tokenizer bounds it in tokens).
  size_t max_string_bytes = 64 * 1024;
};

struct EmbeddingsRequest {
  std::string model;
  // Exactly one of the two is non-empty.
  std::vector<std::string> texts;
  std::vector<std::vector<int64_t>> token_ids;
  bool base64 = false;  // encoding_format "base64" (float32 little-endian bytes), else "float"
  // Output size requested (`dimensions`); nullopt: the model's own.
  std::optional<int64_t> dimensions;

  size_t size() const { return texts.empty() ? token_ids.size() : texts.size(); }
};

// An error in OpenAI's terms; the HTTP status is ToHttpStatus(code), `param` names the request
// field at fault (empty: null).
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;  // empty: null
};
// {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
std::string ErrorBody(const ApiError& error);
// An engine or conversion status in OpenAI's terms: the HTTP status every route gives it
// (ToHttpStatusCode), with OpenAI's type and code (404 model_not_found, 429 rate_limit_error,
// 5xx server_error).
ApiError FromStatus(const absl::Status& status, absl::string_view model);

// Parses and checks a request body. On error the ApiError names the parameter.
struct ParsedRequest {
  std::optional<EmbeddingsRequest> request;
  ApiError error;  // meaningful when !request
};
ParsedRequest ParseEmbeddingsRequest(absl::string_view body, const EmbeddingsLimits& limits);

// Where the token counts of string inputs come from (the model's outputs say which it has).
enum class TokenCounts { kNone, kNumTokens, kInputIds };

// The engine request for `request` on its model (newest version), requesting `embedding` and,
// for string inputs, the output `counts` names (`num_tokens` or `input_ids`).
std::unique_ptr<engine::InferenceRequest> ToInferenceRequest(
    const EmbeddingsRequest& request, TokenCounts counts,
    engine::InferenceRequest::Completion on_complete);

// The OpenAI response for `response` (the engine's answer to ToInferenceRequest): `dimensions`
// applied as OpenAI documents it for its text-embedding-3 models (the first `dimensions` values,
// L2-normalized again; only meaningful for models trained for it, Matryoshka-style), a
// `dimensions` above the model's size refused. Internal error if the model's answer does not
// match the contract above.
absl::StatusOr<std::string> ToResponseJson(const EmbeddingsRequest& request,
                                           const engine::InferenceResponse& response);

// GET /v1/models: {"object": "list", "data": [{"id", "object": "model", "created", "owned_by"}]}.
// With `capabilities` (one list per name, same order), each model also says what it can do
// ("embed", "rerank", "classify"), so that a client can tell the routes it may call.
std::string ModelsListJson(const std::vector<std::string>& model_names,
                           const std::vector<std::vector<std::string>>& capabilities = {});

}  // namespace sluice::server::http::openai
