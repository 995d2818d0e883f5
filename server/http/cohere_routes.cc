// HttpRoutes' Cohere/Jina-style rerank (issue 39): POST /v1/rerank (Cohere's Client, Jina) and
// POST /v2/rerank (Cohere's ClientV2), on a cross-encoder with one label. A request's N documents
// are N (query, document) pairs of one engine task (text_tasks.h), batched with other requests'
// sequences; the answer lists them by relevance_score (the model's score: sigmoid of its logit,
// as sentence-transformers' CrossEncoder gives it), best first, cut to top_n. Errors in Cohere's
// shape {"message": ...}.

#include <algorithm>
#include <atomic>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/echo.h"
#include "nlohmann/json.hpp"
#include "server/http/http_routes.h"
#include "server/http/text_tasks.h"
#include "server/status_convert.h"

namespace sluice::server::http {
namespace {

using nlohmann::json;

HttpResponse CohereError(int status, absl::string_view message) {
  HttpResponse response;
  response.status = status;
  response.body =
      json{{"message", std::string(message)}}.dump(-1, ' ', false, json::error_handler_t::replace);
  if (status == 429 || status == 503) response.headers.emplace_back("Retry-After", "1");
  return response;
}

HttpResponse CohereError(const absl::Status& status) {
  return CohereError(ToHttpStatusCode(status), status.message());
}

// A response id, unique in this process (Cohere answers a UUID; clients only echo it).
std::string NextId() {
  static std::atomic<uint64_t> counter{0};
  return absl::StrFormat("sluice-rerank-%016x", counter.fetch_add(1) + 1);
}

struct Document {
  std::string text;
  json original;  // as given (a string, or an object with `text`)
};

struct RerankRequest {
  std::string model;
  std::string query;
  std::vector<Document> documents;
  size_t top_n = 0;  // 0: all
  bool return_documents = false;
  // Each document's own tokens kept (its first ones) before the model's limit; 0: no cap.
  int64_t max_tokens_per_doc = 0;
};

absl::StatusOr<RerankRequest> ParseRerank(const HttpRequest& request, int api_version,
                                          const HttpRoutesOptions& options) {
  if (request.body->size() > options.max_json_bytes) {
    return PayloadTooLargeError(absl::StrCat("the request body is ", request.body->size(),
                                             " bytes; at most ", options.max_json_bytes,
                                             " (--http-max-json-bytes)"));
  }
  json body = json::parse(*request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return absl::InvalidArgumentError("invalid request: the body must be a JSON object");
  }
  RerankRequest parsed;
  auto string_field = [&](const char* name, std::string* out, bool required) -> absl::Status {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) {
      return required ? absl::InvalidArgumentError(
                            absl::StrCat("invalid request: ", name, " must be a non-empty string"))
                      : absl::OkStatus();
    }
    if (!it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid request: ", name, " must be a string"));
    }
    *out = it->get<std::string>();
    return absl::OkStatus();
  };
  if (absl::Status s = string_field("model", &parsed.model, false); !s.ok()) return s;
  if (absl::Status s = string_field("query", &parsed.query, true); !s.ok()) return s;
  if (parsed.query.empty()) {
    return absl::InvalidArgumentError("invalid request: query must be a non-empty string");
  }
  auto documents = body.find("documents");
  if (documents == body.end() || !documents->is_array() || documents->empty()) {
    return absl::InvalidArgumentError("invalid request: documents must be a non-empty array");
  }
  if (documents->size() > options.text_limits.max_rerank_documents) {
    return PayloadTooLargeError(
        absl::StrCat("invalid request: ", documents->size(), " documents; at most ",
                     options.text_limits.max_rerank_documents, " (--text-max-rerank-documents)"));
  }
  for (const json& item : *documents) {
    Document document{.original = item};
    if (item.is_string()) {
      document.text = item.get<std::string>();
    } else if (api_version == 1 && item.is_object() && item.contains("text") &&
               item["text"].is_string()) {
      document.text = item["text"].get<std::string>();
    } else {
      return absl::InvalidArgumentError(
          api_version == 1
              ? "invalid request: each document must be a string or an object with a 'text' string"
              : "invalid request: each document must be a string");
    }
    parsed.documents.push_back(std::move(document));
  }
  if (auto top_n = body.find("top_n"); top_n != body.end() && !top_n->is_null()) {
    if (!top_n->is_number_integer() || top_n->get<int64_t>() < 1) {
      return absl::InvalidArgumentError("invalid request: top_n must be a positive integer");
    }
    parsed.top_n = static_cast<size_t>(top_n->get<int64_t>());
  }
  // v1 answers documents only when asked; v2 never does (its results carry index and score).
  if (auto flag = body.find("return_documents"); flag != body.end() && !flag->is_null()) {
    if (!flag->is_boolean()) {
      return absl::InvalidArgumentError("invalid request: return_documents must be a boolean");
    }
    parsed.return_documents = api_version == 1 && flag->get<bool>();
  }
  if (auto max = body.find("max_tokens_per_doc"); max != body.end() && !max->is_null()) {
    if (!max->is_number_integer() || max->get<int64_t>() < 1) {
      return absl::InvalidArgumentError(
          "invalid request: max_tokens_per_doc must be a positive integer");
    }
    // Beyond any model's limit it changes nothing; bounded so it fits the engine's int.
    parsed.max_tokens_per_doc = std::min<int64_t>(max->get<int64_t>(), int64_t{1} << 30);
  }
  return parsed;
}

}  // namespace

HttpResponse CohereErrorResponse(const HttpError& error) {
  return CohereError(error.status, error.message);
}

void HttpRoutes::CohereRerank(int api_version, HttpRequest&& request, Responder respond) {
  auto active =
      std::make_shared<const ServingState::ActiveCall>(options_.serving->http_infer_requests());
  absl::StatusOr<RerankRequest> parsed = ParseRerank(request, api_version, options_);
  if (!parsed.ok()) return respond(CohereError(parsed.status()));
  absl::StatusOr<std::string> model = ChooseModel(
      *engine_, parsed->model, [](const TextModelTraits& t) { return t.reranks(); }, "reranking");
  if (!model.ok()) return respond(CohereError(model.status()));
  absl::StatusOr<engine::Engine::ModelInfo> info = engine_->GetModel(*model, -1);
  if (!info.ok()) return respond(CohereError(info.status()));
  TextTask task{
      .model = *model,
      .texts = std::vector<std::string>(parsed->documents.size(), parsed->query),
      .output = "score",
      // Cohere cuts what is too long and never refuses it; max_tokens_per_doc cuts
      // each document first.
      .truncation = {.truncate = true, .max_text_pair_tokens = parsed->max_tokens_per_doc},
      .received = std::chrono::steady_clock::now(),
      .cancelled = request.client_gone};
  for (const Document& document : parsed->documents) task.pairs.push_back(document.text);
  request.body.reset();
  RunTextTask(*engine_, *info->config, std::move(task),
              [respond, active, api_version, model = *model,
               parsed = *std::move(parsed)](absl::StatusOr<TextTaskResult> result) {
                if (!result.ok()) return respond(CohereError(result.status()));
                std::vector<size_t> order(result->rows.size());
                std::iota(order.begin(), order.end(), 0);
                std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
                  return result->rows[a][0] > result->rows[b][0];
                });
                if (parsed.top_n > 0 && parsed.top_n < order.size()) order.resize(parsed.top_n);
                json results = json::array();
                for (size_t i : order) {
                  json item = {{"index", i}, {"relevance_score", result->rows[i][0]}};
                  if (parsed.return_documents) {
                    const json& original = parsed.documents[i].original;
                    item["document"] = original.is_string() ? json{{"text", original}} : original;
                  }
                  results.push_back(std::move(item));
                }
                const int64_t tokens = result->total_tokens();
                json meta = {{"api_version", {{"version", api_version == 1 ? "1" : "2"}}},
                             {"billed_units", {{"search_units", 1}}}};
                if (result->tokens.has_value()) meta["tokens"] = {{"input_tokens", tokens}};
                HttpResponse response;
                response.body = json{{"id", NextId()},
                                     {"model", model},
                                     {"results", std::move(results)},
                                     {"meta", std::move(meta)},
                                     {"usage", {{"total_tokens", tokens}}}}
                                    .dump(-1, ' ', false, json::error_handler_t::replace);
                respond(std::move(response));
              });
}

}  // namespace sluice::server::http
