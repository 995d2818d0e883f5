// HttpRoutes' OpenAI-compatible routes (issue 21): POST /v1/embeddings and GET /v1/models[/{id}],
// over the same engine (queue, limits, metrics, access log) as the KServe routes, with OpenAI's
// error shape for every failure. The conversion itself is openai_embeddings.{h,cc}.

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "common/echo.h"
#include "common/mutex.h"
#include "server/http/http_routes.h"
#include "server/http/openai_embeddings.h"
#include "server/http/parts_gather.h"
#include "server/http/text_tasks.h"

namespace sluice::server::http {
namespace {

using openai::ApiError;
using openai::EmbeddingsRequest;

constexpr char kEmbeddingOutput[] = "embedding";
constexpr char kNumTokensOutput[] = "num_tokens";
constexpr char kTextInput[] = "text";
constexpr char kIdsInput[] = "input_ids";

HttpResponse OpenAiError(const ApiError& error) {
  HttpResponse response;
  response.status = error.http_status;
  response.body = openai::ErrorBody(error);
  // The SDK retries 429 and 503 and honours Retry-After.
  if (error.http_status == 429 || error.http_status == 503) {
    response.headers.emplace_back("Retry-After", "1");
  }
  return response;
}

ApiError Invalid(std::string message, std::string param, std::string code = "") {
  ApiError error;
  error.http_status = 400;
  error.message = std::move(message);
  error.param = std::move(param);
  error.code = std::move(code);
  return error;
}

// Why `config` is not an embedding model (an encoder with an FP32 `embedding` output and token
// ids as input), or nullopt.
std::optional<std::string> NotEmbeddingModel(const engine::ModelConfig& config) {
  const engine::TensorSpec* embedding = config.FindOutput(kEmbeddingOutput);
  if (config.backend != "encoder" || embedding == nullptr ||
      embedding->dtype != engine::DataType::kFp32 || config.FindInput(kIdsInput) == nullptr) {
    return absl::StrCat("model '", common::EchoInput(config.name), "' (backend '", config.backend,
                        "') is not an embedding model: /v1/embeddings serves encoder models with "
                        "an FP32 'embedding' output and an 'input_ids' input");
  }
  return std::nullopt;
}

// The embedding size the model declares (its last output dimension), or -1 if variable.
int64_t EmbeddingSize(const engine::ModelConfig& config) {
  const engine::TensorSpec* embedding = config.FindOutput(kEmbeddingOutput);
  return embedding == nullptr || embedding->dims.empty() ? -1 : embedding->dims.back();
}

// Rows [begin, end) of `request`.
EmbeddingsRequest Slice(const EmbeddingsRequest& request, size_t begin, size_t end) {
  EmbeddingsRequest part;
  part.model = request.model;
  part.base64 = request.base64;
  if (!request.texts.empty()) {
    part.texts.assign(request.texts.begin() + begin, request.texts.begin() + end);
  } else {
    part.token_ids.assign(request.token_ids.begin() + begin, request.token_ids.begin() + end);
  }
  return part;
}

// One response of every part's `embedding` (and `num_tokens`, `input_ids`) rows, in order.
absl::StatusOr<engine::InferenceResponse> JoinEmbeddings(
    const std::string& model, std::vector<engine::InferenceResponse> answers) {
  if (answers.size() == 1) return std::move(answers[0]);
  engine::Tensor embedding{kEmbeddingOutput, engine::DataType::kFp32, {0, 0}, {}};
  engine::Tensor num_tokens{kNumTokensOutput, engine::DataType::kInt64, {0}, {}};
  bool all_counts = true;
  // The tokens each row ran with (`input_ids` [rows, seq] of each part): rows of all parts,
  // padded with 0 to the longest part's seq.
  int64_t longest = 0;
  for (const engine::InferenceResponse& answer : answers) {
    for (const engine::Tensor& output : answer.outputs) {
      if (output.name == kIdsInput && output.shape.size() == 2) {
        longest = std::max(longest, output.shape[1]);
      }
    }
  }
  engine::Tensor ids{kIdsInput, engine::DataType::kInt64, {0, longest}, {}};
  bool all_ids = longest > 0;
  for (const engine::InferenceResponse& answer : answers) {
    bool has_counts = false;
    bool has_ids = false;
    for (const engine::Tensor& output : answer.outputs) {
      if (output.name == kEmbeddingOutput) {
        if (output.shape.size() != 2 ||
            (embedding.shape[1] != 0 && output.shape[1] != embedding.shape[1])) {
          return absl::InternalError(absl::StrCat("model '", common::EchoInput(model),
                                                  "' answered embeddings of different sizes"));
        }
        embedding.shape[0] += output.shape[0];
        embedding.shape[1] = output.shape[1];
        embedding.data.insert(embedding.data.end(), output.data.begin(), output.data.end());
      } else if (output.name == kNumTokensOutput) {
        has_counts = true;
        num_tokens.shape[0] += output.shape.empty() ? 0 : output.shape[0];
        num_tokens.data.insert(num_tokens.data.end(), output.data.begin(), output.data.end());
      } else if (output.name == kIdsInput && output.shape.size() == 2 &&
                 output.dtype == engine::DataType::kInt64 &&
                 output.data.size() ==
                     static_cast<size_t>(output.shape[0] * output.shape[1]) * sizeof(int64_t)) {
        has_ids = true;
        const size_t row_bytes = static_cast<size_t>(output.shape[1]) * sizeof(int64_t);
        for (int64_t row = 0; row < output.shape[0]; ++row) {
          const size_t at = ids.data.size();
          ids.data.resize(at + static_cast<size_t>(longest) * sizeof(int64_t));
          std::memcpy(ids.data.data() + at, output.data.data() + row * row_bytes, row_bytes);
        }
        ids.shape[0] += output.shape[0];
      }
    }
    all_counts = all_counts && has_counts;
    all_ids = all_ids && has_ids;
  }
  engine::InferenceResponse joined;
  joined.outputs.push_back(std::move(embedding));
  if (all_counts) joined.outputs.push_back(std::move(num_tokens));
  if (all_ids) joined.outputs.push_back(std::move(ids));
  return joined;
}

// The OpenAI answer to an embeddings request from its parts' responses (PartsGather).
void AnswerEmbeddings(const EmbeddingsRequest& request,
                      absl::StatusOr<std::vector<engine::InferenceResponse>> answers,
                      const Responder& respond) {
  if (!answers.ok()) {
    respond(OpenAiError(openai::FromStatus(answers.status(), request.model)));
    return;
  }
  absl::StatusOr<engine::InferenceResponse> joined =
      JoinEmbeddings(request.model, *std::move(answers));
  absl::StatusOr<std::string> body =
      joined.ok() ? openai::ToResponseJson(request, *joined) : joined.status();
  if (!body.ok()) {
    ApiError error = openai::FromStatus(body.status(), request.model);
    if (body.status().code() == absl::StatusCode::kInvalidArgument) error.param = "dimensions";
    respond(OpenAiError(error));
    return;
  }
  HttpResponse response;
  response.body = *std::move(body);
  respond(std::move(response));
}

}  // namespace

HttpResponse OpenAiErrorResponse(const HttpError& error) {
  ApiError api;
  api.http_status = error.status;
  api.message = error.message;
  api.code = error.code;
  if (error.status >= 500) api.type = "server_error";
  return OpenAiError(api);
}

void HttpRoutes::OpenAiModels(const std::string& model, Responder respond) {
  // Ready models of the text APIs: embedding models (the ones /v1/embeddings answers) and
  // sequence classifiers (rerank, classify), each with what it can do.
  std::vector<std::string> names;
  std::vector<std::vector<std::string>> capabilities;
  std::set<std::string> seen;
  for (const engine::ModelVersionStatus& status : engine_->ListModels()) {
    if (status.state != engine::ModelState::kReady || !seen.insert(status.name).second) continue;
    if (!model.empty() && status.name != model) continue;
    absl::StatusOr<engine::Engine::ModelInfo> info = engine_->GetModel(status.name, -1);
    if (!info.ok()) continue;
    const TextModelTraits traits = TraitsOf(*info->config);
    std::vector<std::string> can;
    if (!NotEmbeddingModel(*info->config).has_value() && !traits.classifies) {
      can.emplace_back("embed");
    }
    if (traits.reranks()) can.emplace_back("rerank");
    if (traits.classifies) can.emplace_back("classify");
    if (can.empty()) continue;
    names.push_back(status.name);
    capabilities.push_back(std::move(can));
  }
  if (model.empty()) {
    HttpResponse response;
    response.body = openai::ModelsListJson(names, capabilities);
    respond(std::move(response));
    return;
  }
  if (names.empty()) {
    ApiError error = openai::FromStatus(absl::NotFoundError(""), model);
    respond(OpenAiError(error));
    return;
  }
  // One model object: the list's only element.
  const std::string list = openai::ModelsListJson(names, capabilities);
  const size_t open = list.find('[');
  HttpResponse response;
  response.body = list.substr(open + 1, list.size() - open - 3);
  respond(std::move(response));
}

void HttpRoutes::Embeddings(HttpRequest&& request, Responder respond) {
  const auto received = std::chrono::steady_clock::now();
  auto active =
      std::make_shared<const ServingState::ActiveCall>(options_.serving->http_infer_requests());
  if (request.body->size() > options_.max_json_bytes) {
    ApiError error =
        Invalid(absl::StrCat("the request body is ", request.body->size(), " bytes; at most ",
                             options_.max_json_bytes, " (--http-max-json-bytes)"),
                "input");
    error.http_status = 413;
    respond(OpenAiError(error));
    return;
  }
  openai::ParsedRequest parsed =
      openai::ParseEmbeddingsRequest(*request.body, options_.embeddings_limits);
  request.body.reset();  // parsed: its bytes leave the in-flight budget
  if (!parsed.request.has_value()) {
    respond(OpenAiError(parsed.error));
    return;
  }
  EmbeddingsRequest& embeddings = *parsed.request;
  absl::StatusOr<engine::Engine::ModelInfo> info = engine_->GetModel(embeddings.model, -1);
  if (!info.ok()) {
    respond(OpenAiError(openai::FromStatus(info.status(), embeddings.model)));
    return;
  }
  const engine::ModelConfig& config = *info->config;
  if (std::optional<std::string> why = NotEmbeddingModel(config); why.has_value()) {
    respond(OpenAiError(Invalid(*std::move(why), "model", "model_not_embedding")));
    return;
  }
  if (!embeddings.texts.empty()) {
    const engine::TensorSpec* text = config.FindInput(kTextInput);
    if (text == nullptr || text->dtype != engine::DataType::kBytes) {
      respond(OpenAiError(Invalid(
          absl::StrCat("model '", common::EchoInput(embeddings.model),
                       "' takes token ids only: it has no tokenizer (no tokenizer.json, so no "
                       "BYTES 'text' input). Send 'input' as an array of token ids or an array of "
                       "such arrays."),
          "input", "text_input_unsupported")));
      return;
    }
  }
  if (const int64_t size = EmbeddingSize(config);
      embeddings.dimensions.has_value() && size > 0 && *embeddings.dimensions > size) {
    respond(OpenAiError(Invalid(absl::StrCat("'dimensions' is ", *embeddings.dimensions,
                                             " but model '", common::EchoInput(embeddings.model),
                                             "' makes embeddings of ", size, " dimensions"),
                                "dimensions")));
    return;
  }
  const openai::TokenCounts counts =
      config.FindOutput(kNumTokensOutput) != nullptr ? openai::TokenCounts::kNumTokens
      : config.FindOutput(kIdsInput) != nullptr      ? openai::TokenCounts::kInputIds
                                                     : openai::TokenCounts::kNone;
  // The engine takes at most max_batch_size inputs per request: a larger OpenAI request (up to
  // embeddings_limits.max_inputs) is split, and its parts queue and batch like any others.
  const size_t total = embeddings.size();
  const size_t per_part =
      config.max_batch_size > 0 ? static_cast<size_t>(config.max_batch_size) : total;
  const size_t parts = (total + per_part - 1) / per_part;
  std::vector<EmbeddingsRequest> slices;
  for (size_t begin = 0; begin < total; begin += per_part) {
    slices.push_back(Slice(embeddings, begin, std::min(total, begin + per_part)));
  }
  // The last part to complete answers; the request, the responder and the active-call count live
  // until then.
  auto gather = std::make_shared<PartsGather>(
      parts,
      [embeddings = std::move(embeddings), respond = std::move(respond),
       active = std::move(active)](absl::StatusOr<std::vector<engine::InferenceResponse>> answers) {
        AnswerEmbeddings(embeddings, std::move(answers), respond);
      });
  for (size_t part = 0; part < parts; ++part) {
    // A part the engine refused at once (queue full, draining) decides the answer: the parts
    // after it are not submitted.
    if (gather->Failed()) {
      gather->Complete(part, absl::CancelledError("an earlier part of the request failed"));
      continue;
    }
    std::unique_ptr<engine::InferenceRequest> inference = openai::ToInferenceRequest(
        slices[part], counts, [gather, part](absl::StatusOr<engine::InferenceResponse> result) {
          gather->Complete(part, std::move(result));
        });
    inference->received_time = received;
    inference->cancelled = request.client_gone;
    engine_->Submit(std::move(inference));
  }
}

}  // namespace sluice::server::http
