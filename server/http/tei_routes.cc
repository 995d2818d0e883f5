// HttpRoutes' Hugging Face TEI-compatible routes (issue 39): POST /embed, /rerank, /predict and /
// (by the model's kind, as TEI routes it: huggingface_hub's InferenceClient posts there), POST
// /tokenize (the tokenizer alone, no model run), GET /info and /health, with TEI's request and
// response bodies and its error shape {"error": ..., "error_type": ...}: 413 for more inputs than
// max_client_batch_size, 422 for validation errors (an input over the model's limit with
// `truncate: false` among them), 424 for a model failure, 429 when overloaded. The work itself is
// text_tasks.h's; with several models served, a `model` field in the body chooses.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/echo.h"
#include "nlohmann/json.hpp"
#include "server/http/http_routes.h"
#include "server/http/text_tasks.h"
#include "server/status_convert.h"
#include "text/tokenizer.h"

namespace sluice::server::http {
namespace {

using nlohmann::json;

struct TeiError {
  int status = 422;
  std::string message;
  std::string type = "Validation";
};

HttpResponse TeiResponse(const TeiError& error) {
  HttpResponse response;
  response.status = error.status;
  response.body = json{{"error", error.message}, {"error_type", error.type}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
  if (error.status == 429 || error.status == 503) response.headers.emplace_back("Retry-After", "1");
  return response;
}

// A status in TEI's terms: its 422 for what sluice answers 400 (bad input), 424 for a model
// failure, 429 for a full queue; the rest as every route maps them (ToHttpStatusCode).
TeiError FromStatus(const absl::Status& status) {
  TeiError error;
  error.message = std::string(status.message());
  error.status = ToHttpStatusCode(status);
  switch (error.status) {
    case 400:
      error.status = 422;
      break;
    case 429:
    case 503:
      error.type = "Overloaded";
      break;
    case 500:
      error.status = 424;
      error.type = "Backend";
      break;
    case 413:
    case 404:
      break;
    default:
      if (error.status >= 500) error.type = "Backend";
      break;
  }
  return error;
}

TeiError Invalid(std::string message) { return TeiError{422, std::move(message), "Validation"}; }

HttpResponse Json200(const json& body) {
  HttpResponse response;
  response.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return response;
}

// The body as a JSON object, or the error to answer.
absl::StatusOr<json> ParseBody(const HttpRequest& request, size_t max_bytes) {
  if (request.body->size() > max_bytes) {
    return PayloadTooLargeError(absl::StrCat("the request body is ", request.body->size(),
                                             " bytes; at most ", max_bytes,
                                             " (--http-max-json-bytes)"));
  }
  json body = json::parse(*request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return absl::InvalidArgumentError("the request body must be a JSON object");
  }
  return body;
}

// An optional boolean field; InvalidArgument if present and not a boolean.
absl::StatusOr<bool> BoolField(const json& body, const char* name, bool fallback) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' must be a boolean"));
  return it->get<bool>();
}

absl::StatusOr<std::string> StringField(const json& body, const char* name, bool required) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) {
    if (required) return absl::InvalidArgumentError(absl::StrCat("'", name, "' is missing"));
    return std::string();
  }
  if (!it->is_string())
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' must be a string"));
  return it->get<std::string>();
}

// TEI's `truncate` and `truncation_direction` (Right or Left), as TEI 1.9 reads them: an input
// longer than the model's limit is cut (from the right, or the left) when `truncate` is true and
// refused with 422 when it is false; an absent `truncate` is the server's auto_truncate, which
// /info reports as true (TEI's default). The engine does the rest (engine::TextTruncation).
absl::StatusOr<engine::TextTruncation> TruncationOf(const json& body) {
  engine::TextTruncation truncation;
  absl::StatusOr<bool> truncate = BoolField(body, "truncate", true);
  if (!truncate.ok()) return truncate.status();
  truncation.truncate = *truncate;
  absl::StatusOr<std::string> direction = StringField(body, "truncation_direction", false);
  if (!direction.ok()) return direction.status();
  if (*direction == "Left") {
    truncation.from_left = true;
  } else if (!direction->empty() && *direction != "Right") {
    return absl::InvalidArgumentError(absl::StrCat("truncation_direction '",
                                                   common::EchoInput(*direction),
                                                   "' is not one of 'Right', 'Left'"));
  }
  return truncation;
}

// `inputs` as a list of strings (a string is a list of one). `single`: it was one string.
absl::StatusOr<std::vector<std::string>> StringInputs(const json& body, bool* single) {
  auto it = body.find("inputs");
  if (it == body.end()) return absl::InvalidArgumentError("'inputs' is missing");
  std::vector<std::string> texts;
  *single = it->is_string();
  if (it->is_string()) {
    texts.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    for (const json& item : *it) {
      if (!item.is_string()) {
        return absl::InvalidArgumentError(
            "'inputs' must be a string or an array of strings (token ids are not supported here)");
      }
      texts.push_back(item.get<std::string>());
    }
  } else {
    return absl::InvalidArgumentError("'inputs' must be a string or an array of strings");
  }
  if (texts.empty()) return absl::InvalidArgumentError("'inputs' cannot be empty");
  return texts;
}

absl::Status CheckBatch(size_t count, size_t limit) {
  if (count > limit) {
    return PayloadTooLargeError(absl::StrCat("batch size ", count, " > maximum allowed batch size ",
                                             limit, " (--text-max-client-batch-size)"));
  }
  return absl::OkStatus();
}

void L2Normalize(std::vector<float>& row) {
  double sum = 0;
  for (float v : row) sum += double{v} * v;
  const double norm = std::sqrt(sum);
  if (norm > 0) {
    for (float& v : row) v = static_cast<float>(v / norm);
  }
}

// One input's scores as TEI's /predict answers them: every label, highest score first.
json LabelScores(const std::vector<float>& scores, const std::vector<std::string>& labels) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  json out = json::array();
  for (size_t i : order) {
    out.push_back({{"score", scores[i]}, {"label", i < labels.size() ? labels[i] : ""}});
  }
  return out;
}

}  // namespace

HttpResponse TeiErrorResponse(const HttpError& error) {
  return TeiResponse(TeiError{error.status, error.message,
                              error.status == 429 || error.status == 503 ? "Overloaded"
                              : error.status >= 500                      ? "Backend"
                                                                         : "Validation"});
}

void HttpRoutes::TeiEmbed(HttpRequest&& request, Responder respond) {
  auto active =
      std::make_shared<const ServingState::ActiveCall>(options_.serving->http_infer_requests());
  absl::StatusOr<json> body = ParseBody(request, options_.max_json_bytes);
  if (!body.ok()) return respond(TeiResponse(FromStatus(body.status())));
  bool single = false;
  absl::StatusOr<std::vector<std::string>> texts = StringInputs(*body, &single);
  absl::StatusOr<bool> normalize = BoolField(*body, "normalize", true);
  absl::StatusOr<std::string> model_field = StringField(*body, "model", false);
  absl::StatusOr<std::string> prompt_name = StringField(*body, "prompt_name", false);
  absl::StatusOr<engine::TextTruncation> truncation = TruncationOf(*body);
  for (const absl::Status& status : {texts.status(), normalize.status(), model_field.status(),
                                     prompt_name.status(), truncation.status()}) {
    if (!status.ok()) return respond(TeiResponse(FromStatus(status)));
  }
  if (absl::Status batch = CheckBatch(texts->size(), options_.text_limits.max_client_batch_size);
      !batch.ok()) {
    return respond(TeiResponse(FromStatus(batch)));
  }
  std::optional<int64_t> dimensions;
  if (auto it = body->find("dimensions"); it != body->end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1) {
      return respond(TeiResponse(Invalid("'dimensions' must be a positive integer")));
    }
    dimensions = it->get<int64_t>();
  }
  absl::StatusOr<std::string> model = ChooseModel(
      *engine_, *model_field, [](const TextModelTraits& t) { return t.embeds; }, "embeddings");
  if (!model.ok()) return respond(TeiResponse(FromStatus(model.status())));
  absl::StatusOr<engine::Engine::ModelInfo> info = engine_->GetModel(*model, -1);
  if (!info.ok()) return respond(TeiResponse(FromStatus(info.status())));
  const TextModelTraits traits = TraitsOf(*info->config);
  if (dimensions.has_value() && traits.embedding_size > 0 && *dimensions > traits.embedding_size) {
    return respond(TeiResponse(Invalid(
        absl::StrCat("dimensions ", *dimensions, " > the model's ", traits.embedding_size))));
  }
  TextTask task{.model = *model,
                .texts = *std::move(texts),
                .output = "embedding",
                .truncation = *truncation,
                .received = std::chrono::steady_clock::now(),
                .cancelled = request.client_gone};
  // The model's prompt of that name (prompt_name absent: its default prompt, if it has one).
  if (!prompt_name->empty()) task.prompt_name = *prompt_name;
  request.body.reset();
  RunTextTask(
      *engine_, *info->config, std::move(task),
      [respond, active, normalize = *normalize, dimensions](absl::StatusOr<TextTaskResult> result) {
        if (!result.ok()) return respond(TeiResponse(FromStatus(result.status())));
        json out = json::array();
        for (std::vector<float>& row : result->rows) {
          if (dimensions.has_value()) row.resize(static_cast<size_t>(*dimensions));
          if (normalize) L2Normalize(row);
          out.push_back(row);
        }
        respond(Json200(out));
      });
}

void HttpRoutes::TeiRerank(HttpRequest&& request, Responder respond) {
  auto active =
      std::make_shared<const ServingState::ActiveCall>(options_.serving->http_infer_requests());
  absl::StatusOr<json> body = ParseBody(request, options_.max_json_bytes);
  if (!body.ok()) return respond(TeiResponse(FromStatus(body.status())));
  absl::StatusOr<std::string> query = StringField(*body, "query", true);
  absl::StatusOr<bool> raw_scores = BoolField(*body, "raw_scores", false);
  absl::StatusOr<bool> return_text = BoolField(*body, "return_text", false);
  absl::StatusOr<std::string> model_field = StringField(*body, "model", false);
  absl::StatusOr<engine::TextTruncation> truncation = TruncationOf(*body);
  for (const absl::Status& status : {query.status(), raw_scores.status(), return_text.status(),
                                     model_field.status(), truncation.status()}) {
    if (!status.ok()) return respond(TeiResponse(FromStatus(status)));
  }
  auto texts_field = body->find("texts");
  if (texts_field == body->end() || !texts_field->is_array() || texts_field->empty()) {
    return respond(TeiResponse(Invalid("'texts' must be a non-empty array of strings")));
  }
  std::vector<std::string> texts;
  for (const json& text : *texts_field) {
    if (!text.is_string()) return respond(TeiResponse(Invalid("'texts' must hold strings")));
    texts.push_back(text.get<std::string>());
  }
  if (absl::Status batch = CheckBatch(texts.size(), options_.text_limits.max_client_batch_size);
      !batch.ok()) {
    return respond(TeiResponse(FromStatus(batch)));
  }
  absl::StatusOr<std::string> model = ChooseModel(
      *engine_, *model_field, [](const TextModelTraits& t) { return t.reranks(); }, "reranking");
  if (!model.ok()) return respond(TeiResponse(FromStatus(model.status())));
  absl::StatusOr<engine::Engine::ModelInfo> info = engine_->GetModel(*model, -1);
  if (!info.ok()) return respond(TeiResponse(FromStatus(info.status())));
  TextTask task{.model = *model,
                .texts = std::vector<std::string>(texts.size(), *query),
                .pairs = texts,
                .output = *raw_scores ? "logits" : "score",
                .truncation = *truncation,
                .received = std::chrono::steady_clock::now(),
                .cancelled = request.client_gone};
  request.body.reset();
  RunTextTask(*engine_, *info->config, std::move(task),
              [respond, active, texts = std::move(texts),
               return_text = *return_text](absl::StatusOr<TextTaskResult> result) {
                if (!result.ok()) return respond(TeiResponse(FromStatus(result.status())));
                std::vector<size_t> order(result->rows.size());
                std::iota(order.begin(), order.end(), 0);
                std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
                  return result->rows[a][0] > result->rows[b][0];
                });
                json out = json::array();
                for (size_t i : order) {
                  json item = {{"index", i}, {"score", result->rows[i][0]}};
                  if (return_text) item["text"] = texts[i];
                  out.push_back(std::move(item));
                }
                respond(Json200(out));
              });
}

void HttpRoutes::TeiPredict(HttpRequest&& request, Responder respond) {
  auto active =
      std::make_shared<const ServingState::ActiveCall>(options_.serving->http_infer_requests());
  absl::StatusOr<json> body = ParseBody(request, options_.max_json_bytes);
  if (!body.ok()) return respond(TeiResponse(FromStatus(body.status())));
  absl::StatusOr<bool> raw_scores = BoolField(*body, "raw_scores", false);
  absl::StatusOr<std::string> model_field = StringField(*body, "model", false);
  absl::StatusOr<engine::TextTruncation> truncation = TruncationOf(*body);
  for (const absl::Status& status :
       {raw_scores.status(), model_field.status(), truncation.status()}) {
    if (!status.ok()) return respond(TeiResponse(FromStatus(status)));
  }
  // TEI's forms: "text" (one input), ["a", "b"] (one pair), or an array of those (a batch).
  auto inputs = body->find("inputs");
  if (inputs == body->end()) return respond(TeiResponse(Invalid("'inputs' is missing")));
  auto is_pair = [](const json& j) {
    return j.is_array() && j.size() == 2 && j[0].is_string() && j[1].is_string();
  };
  std::vector<json> items;
  bool batch = false;
  if (inputs->is_string() || is_pair(*inputs)) {
    items.push_back(*inputs);
  } else if (inputs->is_array() && !inputs->empty()) {
    batch = true;
    for (const json& item : *inputs) items.push_back(item);
  } else {
    return respond(TeiResponse(
        Invalid("'inputs' must be a string, a pair [text, text], or a non-empty array of those")));
  }
  std::vector<std::string> firsts;
  std::vector<std::string> seconds;
  for (const json& item : items) {
    if (item.is_string()) {
      firsts.push_back(item.get<std::string>());
      seconds.emplace_back();
    } else if (is_pair(item)) {
      firsts.push_back(item[0].get<std::string>());
      seconds.push_back(item[1].get<std::string>());
    } else {
      return respond(TeiResponse(Invalid("each input must be a string or a pair [text, text]")));
    }
  }
  const bool any_pair = std::any_of(items.begin(), items.end(), is_pair);
  if (any_pair && !std::all_of(items.begin(), items.end(), is_pair)) {
    return respond(TeiResponse(Invalid("a batch mixes single texts and pairs; send one kind")));
  }
  if (absl::Status limit = CheckBatch(firsts.size(), options_.text_limits.max_client_batch_size);
      !limit.ok()) {
    return respond(TeiResponse(FromStatus(limit)));
  }
  absl::StatusOr<std::string> model = ChooseModel(
      *engine_, *model_field,
      [any_pair](const TextModelTraits& t) { return t.classifies && (!any_pair || t.pairs); },
      "classification");
  if (!model.ok()) return respond(TeiResponse(FromStatus(model.status())));
  absl::StatusOr<engine::Engine::ModelInfo> info = engine_->GetModel(*model, -1);
  if (!info.ok()) return respond(TeiResponse(FromStatus(info.status())));
  const TextModelTraits traits = TraitsOf(*info->config);
  TextTask task{.model = *model,
                .texts = std::move(firsts),
                .pairs = any_pair ? std::move(seconds) : std::vector<std::string>(),
                .output = *raw_scores ? "logits" : "score",
                .truncation = *truncation,
                .received = std::chrono::steady_clock::now(),
                .cancelled = request.client_gone};
  request.body.reset();
  RunTextTask(
      *engine_, *info->config, std::move(task),
      [respond, active, batch, labels = traits.labels](absl::StatusOr<TextTaskResult> result) {
        if (!result.ok()) return respond(TeiResponse(FromStatus(result.status())));
        if (!batch) return respond(Json200(LabelScores(result->rows[0], labels)));
        json out = json::array();
        for (const std::vector<float>& row : result->rows) {
          out.push_back(LabelScores(row, labels));
        }
        respond(Json200(out));
      });
}

void HttpRoutes::TeiTokenize(HttpRequest&& request, Responder respond) {
  absl::StatusOr<json> body = ParseBody(request, options_.max_json_bytes);
  if (!body.ok()) return respond(TeiResponse(FromStatus(body.status())));
  bool single = false;
  absl::StatusOr<std::vector<std::string>> texts = StringInputs(*body, &single);
  absl::StatusOr<bool> add_special_tokens = BoolField(*body, "add_special_tokens", true);
  absl::StatusOr<std::string> model_field = StringField(*body, "model", false);
  absl::StatusOr<std::string> prompt_name = StringField(*body, "prompt_name", false);
  for (const absl::Status& status :
       {texts.status(), add_special_tokens.status(), model_field.status(), prompt_name.status()}) {
    if (!status.ok()) return respond(TeiResponse(FromStatus(status)));
  }
  if (absl::Status batch = CheckBatch(texts->size(), options_.text_limits.max_client_batch_size);
      !batch.ok()) {
    return respond(TeiResponse(FromStatus(batch)));
  }
  absl::StatusOr<std::string> model = ChooseModel(
      *engine_, *model_field, [](const TextModelTraits& t) { return t.embeds || t.classifies; },
      "text tasks");
  if (!model.ok()) return respond(TeiResponse(FromStatus(model.status())));
  absl::StatusOr<engine::Engine::ModelInfo> info = engine_->GetModel(*model, -1);
  if (!info.ok()) return respond(TeiResponse(FromStatus(info.status())));
  // The tokenizer and prompts the encoder loaded, read again from the same version folder (once
  // per load).
  absl::StatusOr<std::shared_ptr<const ModelText>> model_text = tokenizers_.Get(
      *model, info->config, absl::StrCat(repository_->root(), "/", *model, "/", info->version));
  if (!model_text.ok()) {
    return respond(TeiResponse(TeiError{
        424, absl::StrCat("model '", *model, "': tokenizer: ", model_text.status().message()),
        "Tokenizer"}));
  }
  const text::Tokenizer& tokenizer = *(*model_text)->tokenizer;
  // As TEI's /tokenize: the prompt named (else the model's default one, if any) prepended to each
  // input, which is then tokenized whole, so the tokens, their texts and their byte offsets are
  // those of the prompted text, as TEI returns them.
  absl::StatusOr<absl::string_view> prompt =
      (*model_text)
          ->prompts.Resolve(prompt_name->empty() ? std::nullopt
                                                 : std::optional<std::string>(*prompt_name));
  if (!prompt.ok()) return respond(TeiResponse(Invalid(std::string(prompt.status().message()))));
  // No truncation, the special tokens as asked, byte offsets (null for special tokens, and where
  // the pipeline cannot tell them exactly: exact_offsets()).
  text::EncodeOptions options;
  options.add_special_tokens = *add_special_tokens;
  options.ignore_length_limit = true;
  options.with_offsets = true;
  json out = json::array();
  std::string prompted;
  for (const std::string& input : *texts) {
    prompted.assign(prompt->data(), prompt->size());
    prompted.append(input);
    absl::StatusOr<text::Encoding> encoding = tokenizer.Encode(prompted, options);
    if (!encoding.ok()) {
      return respond(
          TeiResponse(TeiError{422, std::string(encoding.status().message()), "Tokenizer"}));
    }
    json tokens = json::array();
    for (size_t i = 0; i < encoding->ids.size(); ++i) {
      const text::TokenOffsets& at = encoding->offsets[i];
      json token = {{"id", encoding->ids[i]}, {"special", encoding->special[i] != 0}};
      if (at.known()) {
        token["text"] =
            prompted.substr(static_cast<size_t>(at.start), static_cast<size_t>(at.stop - at.start));
        token["start"] = at.start;
        token["stop"] = at.stop;
      } else {
        // TEI's text of a special token is the token itself; so here for every token without
        // offsets that is an added token (empty for the others).
        token["text"] = tokenizer.IdToToken(encoding->ids[i]);
        token["start"] = nullptr;
        token["stop"] = nullptr;
      }
      tokens.push_back(std::move(token));
    }
    out.push_back(std::move(tokens));
  }
  respond(Json200(out));
}

void HttpRoutes::TeiRoot(HttpRequest&& request, Responder respond) {
  // TEI routes POST / by its model's kind. Here: the one model the body names, or the one ready
  // text model; an embedder gets /embed, a classifier /predict.
  absl::StatusOr<json> body = ParseBody(request, options_.max_json_bytes);
  if (!body.ok()) return respond(TeiResponse(FromStatus(body.status())));
  absl::StatusOr<std::string> model_field = StringField(*body, "model", false);
  if (!model_field.ok()) return respond(TeiResponse(FromStatus(model_field.status())));
  absl::StatusOr<std::string> model = ChooseModel(
      *engine_, *model_field, [](const TextModelTraits& t) { return t.embeds || t.classifies; },
      "text tasks");
  if (!model.ok()) return respond(TeiResponse(FromStatus(model.status())));
  absl::StatusOr<engine::Engine::ModelInfo> info = engine_->GetModel(*model, -1);
  if (!info.ok()) return respond(TeiResponse(FromStatus(info.status())));
  if (TraitsOf(*info->config).embeds) return TeiEmbed(std::move(request), std::move(respond));
  TeiPredict(std::move(request), std::move(respond));
}

void HttpRoutes::TeiInfo(const std::string& model_field, Responder respond) {
  absl::StatusOr<std::string> model = ChooseModel(
      *engine_, model_field, [](const TextModelTraits& t) { return t.embeds || t.classifies; },
      "text tasks");
  if (!model.ok()) return respond(TeiResponse(FromStatus(model.status())));
  absl::StatusOr<engine::Engine::ModelInfo> info = engine_->GetModel(*model, -1);
  if (!info.ok()) return respond(TeiResponse(FromStatus(info.status())));
  const engine::ModelConfig& config = *info->config;
  const TextModelTraits traits = TraitsOf(config);
  json model_type;
  if (traits.embeds) {
    model_type = {{"embedding", {{"pooling", "model"}}}};
  } else {
    json id2label = json::object();
    json label2id = json::object();
    for (size_t i = 0; i < traits.labels.size(); ++i) {
      id2label[std::to_string(i)] = traits.labels[i];
      label2id[traits.labels[i]] = i;
    }
    model_type = {{traits.reranks() ? "reranker" : "classifier",
                   {{"id2label", id2label}, {"label2id", label2id}}}};
  }
  const engine::RaggedBatchingConfig ragged =
      config.ragged_batching.value_or(engine::RaggedBatchingConfig{});
  respond(Json200({{"model_id", config.name},
                   {"model_sha", nullptr},
                   {"model_dtype", "float32"},
                   {"model_type", model_type},
                   {"max_concurrent_requests", config.queue_policy.max_queue_size},
                   {"max_input_length", ragged.max_sequence_tokens},
                   {"max_batch_tokens", ragged.max_batch_tokens},
                   {"max_batch_requests", config.max_batch_size},
                   {"max_client_batch_size", options_.text_limits.max_client_batch_size},
                   {"auto_truncate", true},
                   {"tokenization_workers", nullptr},
                   {"version", options_.server_version},
                   {"sha", nullptr},
                   {"docker_label", nullptr}}));
}

void HttpRoutes::TeiHealth(Responder respond) {
  if (options_.serving->ready() && !engine_->draining()) {
    HttpResponse response;
    response.content_type.clear();
    return respond(std::move(response));
  }
  respond(TeiResponse(TeiError{503, "the server is not ready", "Unhealthy"}));
}

}  // namespace sluice::server::http
