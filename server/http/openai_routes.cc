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

// Counts a request in sluice_http_infer_requests_active from receipt until the last owner lets
// it go (answered, or refused before the engine saw it).
struct ActiveCount {
  explicit ActiveCount(std::atomic<int64_t>* count) : count(count) {
    if (count != nullptr) count->fetch_add(1, std::memory_order_relaxed);
  }
  ~ActiveCount() {
    if (count != nullptr) count->fetch_sub(1, std::memory_order_relaxed);
  }
  ActiveCount(const ActiveCount&) = delete;
  ActiveCount& operator=(const ActiveCount&) = delete;
  std::atomic<int64_t>* const count;
};

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

// The answers of a request split into engine requests of at most max_batch_size inputs; the
// last completion joins them in input order and answers.
class Gather {
 public:
  Gather(EmbeddingsRequest request, size_t parts, Responder respond,
         std::shared_ptr<const ActiveCount> active)
      : request_(std::move(request)),
        respond_(std::move(respond)),
        active_(std::move(active)),
        remaining_(parts),
        answers_(parts) {}

  // Whether a part has failed already (then the rest need not run: the answer is that error).
  bool Failed() const {
    common::MutexLock lock(&mu_);
    return !error_.ok();
  }

  void Complete(size_t part, absl::StatusOr<engine::InferenceResponse> result) {
    absl::Status error;
    std::vector<engine::InferenceResponse> answers;
    {
      common::MutexLock lock(&mu_);
      if (!result.ok()) {
        if (error_.ok()) error_ = result.status();
      } else {
        answers_[part] = *std::move(result);
      }
      if (--remaining_ > 0) return;
      // The last one: the others are done with the members.
      error = error_;
      answers = std::move(answers_);
    }
    if (!error.ok()) {
      respond_(OpenAiError(openai::FromStatus(error, request_.model)));
      return;
    }
    absl::StatusOr<engine::InferenceResponse> joined = Join(std::move(answers));
    absl::StatusOr<std::string> body =
        joined.ok() ? openai::ToResponseJson(request_, *joined) : joined.status();
    if (!body.ok()) {
      ApiError error = openai::FromStatus(body.status(), request_.model);
      if (body.status().code() == absl::StatusCode::kInvalidArgument) error.param = "dimensions";
      respond_(OpenAiError(error));
      return;
    }
    HttpResponse response;
    response.body = *std::move(body);
    respond_(std::move(response));
  }

 private:
  // One response of every part's `embedding` (and `num_tokens`) rows, in order.
  absl::StatusOr<engine::InferenceResponse> Join(
      std::vector<engine::InferenceResponse> answers) const {
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
            return absl::InternalError(absl::StrCat("model '", common::EchoInput(request_.model),
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

  const EmbeddingsRequest request_;
  const Responder respond_;
  const std::shared_ptr<const ActiveCount> active_;
  mutable common::Mutex mu_;
  size_t remaining_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::vector<engine::InferenceResponse> answers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

void HttpRoutes::OpenAi(const std::vector<std::string>& segments, HttpRequest&& request,
                        Responder respond) {
  const size_t n = segments.size();
  const bool get = request.method == "GET";
  const bool post = request.method == "POST";
  auto wrong_method = [&](absl::string_view allowed) {
    HttpResponse response = OpenAiError(Invalid(
        absl::StrCat(request.method, " is not allowed on ", request.path, "; use ", allowed), "",
        "method_not_allowed"));
    response.status = 405;
    response.headers.emplace_back("Allow", std::string(allowed));
    respond(std::move(response));
  };
  if (n == 2 && segments[1] == "embeddings") {
    if (!post) return wrong_method("POST");
    Embeddings(std::move(request), std::move(respond));
    return;
  }
  if (segments.size() >= 2 && segments.size() <= 3 && segments[1] == "models") {
    if (!get) return wrong_method("GET");
    // Ready embedding models only: the ones /v1/embeddings answers.
    std::vector<std::string> names;
    std::set<std::string> seen;
    for (const engine::ModelVersionStatus& status : engine_->ListModels()) {
      if (status.state != engine::ModelState::kReady || !seen.insert(status.name).second) continue;
      if (n == 3 && status.name != segments[2]) continue;
      absl::StatusOr<engine::Engine::ModelInfo> info = engine_->GetModel(status.name, -1);
      if (info.ok() && !NotEmbeddingModel(*info->config).has_value()) {
        names.push_back(status.name);
      }
    }
    if (n == 2) {
      HttpResponse response;
      response.body = openai::ModelsListJson(names);
      respond(std::move(response));
      return;
    }
    if (names.empty()) {
      ApiError error = openai::FromStatus(absl::NotFoundError(""), segments[2]);
      respond(OpenAiError(error));
      return;
    }
    // One model object: the list's only element.
    const std::string list = openai::ModelsListJson(names);
    const size_t open = list.find('[');
    HttpResponse response;
    response.body = list.substr(open + 1, list.size() - open - 3);
    respond(std::move(response));
    return;
  }
  ApiError error = Invalid(absl::StrCat("no such endpoint: ", request.method, " ", request.path,
                                        " (sluice serves POST /v1/embeddings and GET /v1/models)"),
                           "", "unknown_url");
  error.http_status = 404;
  respond(OpenAiError(error));
}

void HttpRoutes::Embeddings(HttpRequest&& request, Responder respond) {
  const auto received = std::chrono::steady_clock::now();
  auto active = std::make_shared<const ActiveCount>(options_.active_infer_requests);
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
  auto gather =
      std::make_shared<Gather>(std::move(embeddings), parts, std::move(respond), std::move(active));
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
