#pragma once

// HttpRoutes: every HTTP API sluice serves, over the same engine and model repository as the gRPC
// service, as one route table (http_routes.cc: one line per route) and one handler file per API:
//
//   kserve_routes.cc   KServe v2 HTTP/REST (Open Inference Protocol, plus Triton's
//                      model-repository, configuration, statistics and shared-memory extensions)
//   openai_routes.cc   OpenAI's embeddings API under /v1: POST /v1/embeddings on encoder models
//                      with an `embedding` output, GET /v1/models[/{id}], OpenAI's error shape
//   tei_routes.cc      Hugging Face TEI's /embed, /rerank, /predict, /tokenize, /info, /health and
//                      POST / (/tokenize over tokenizer_cache.h, without the model)
//   cohere_routes.cc   Cohere's (and Jina's) POST /v1/rerank and POST /v2/rerank
// (the last two over text_tasks.h: N texts or pairs of one request as engine requests)
//
// Adding a route is one line of the table plus its handler (a method here, defined in its API's
// file); adding an API is an AddApi line (its path prefix and error shape) and a handler file.
// Every API maps an absl::Status to its HTTP status through server/status_convert.h
// (ToHttpStatusCode) and writes its own error body around it.
//
// Handle() returns at once: an infer is converted, validated and submitted, and the engine's
// completion thread answers it; load/unload run on the process's control thread (they block for
// as long as loading takes); everything else is answered inline.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "server/http/http_server.h"
#include "server/http/json_conversion.h"
#include "server/http/openai_embeddings.h"
#include "server/http/route_table.h"
#include "server/http/tokenizer_cache.h"
#include "server/model_control.h"
#include "server/model_repository.h"
#include "server/serving_state.h"

namespace sluice::server::shm {
class SharedMemoryRegistry;
}

namespace sluice::server::http {

// Bounds of the text routes (TEI's and Cohere's), each answered 413 in the API's shape beyond it.
struct TextApiLimits {
  // Inputs of one /embed or /predict request, texts of one TEI /rerank (TEI's
  // --max-client-batch-size, default 32).
  size_t max_client_batch_size = 32;
  // Documents of one Cohere/Jina rerank (Cohere recommends at most 1,000).
  size_t max_rerank_documents = 1000;
};

struct HttpRoutesOptions {
  // load/unload are refused unless this is set (--model-control-mode=explicit), as on gRPC.
  bool explicit_model_control = false;
  // Borrowed, must outlive the routes; required when explicit_model_control is set: the process's
  // one bounded load/unload queue (InferenceService::model_control()), shared with gRPC.
  ModelControl* model_control = nullptr;
  // Reported by GET /v2.
  std::string server_version = "0.1.0";
  // Largest JSON part of an infer request (--http-max-json-bytes): a larger one is answered 413
  // before it is parsed. JSON is parsed and converted on the I/O thread.
  size_t max_json_bytes = kDefaultMaxJsonBytes;
  // The process's liveness, readiness and open-call counts: /v2/health/* answer it, and every
  // inference route counts its requests in http_infer_requests() from receipt until answered.
  // Borrowed, required, must outlive the routes.
  ServingState* serving = nullptr;

  // The process's shared-memory regions, shared with gRPC (/v2/systemsharedmemory/...,
  // /v2/cudasharedmemory/...); borrowed, nullable (then those routes answer 501 and requests
  // naming a region are refused), must outlive the routes.
  shm::SharedMemoryRegistry* shared_memory = nullptr;
  // Bounds of POST /v1/embeddings (inputs per request, tokens per input, bytes per string); the
  // body is also bounded by max_json_bytes.
  openai::EmbeddingsLimits embeddings_limits;
  // Bounds of TEI's and Cohere's routes; their bodies are also bounded by max_json_bytes.
  TextApiLimits text_limits;
};

// Each API's error shape (RouteTable::AddApi), defined in its handler file.
HttpResponse KServeErrorResponse(const HttpError& error);
HttpResponse OpenAiErrorResponse(const HttpError& error);
HttpResponse TeiErrorResponse(const HttpError& error);
HttpResponse CohereErrorResponse(const HttpError& error);

// Thread-safe; the HTTP server calls Handle() from its I/O threads.
class HttpRoutes {
 public:
  // `engine` and `repository` are borrowed and must outlive this object.
  HttpRoutes(engine::Engine* engine, ModelRepository* repository, HttpRoutesOptions options);
  ~HttpRoutes() = default;
  HttpRoutes(const HttpRoutes&) = delete;
  HttpRoutes& operator=(const HttpRoutes&) = delete;

  // The HttpServer's Handler: the route table's Dispatch.
  void Handle(HttpRequest&& request, Responder respond);
  // HttpServerOptions::error_body: the transport's own refusals in the shape of the API that owns
  // `target`.
  std::string ErrorBody(absl::string_view target, int status, absl::string_view message) const;

 private:
  // KServe v2 (kserve_routes.cc).
  void ServerMetadata(const RouteParams& params, HttpRequest&& request, Responder respond);
  void Live(const RouteParams& params, HttpRequest&& request, Responder respond);
  void Ready(const RouteParams& params, HttpRequest&& request, Responder respond);
  void Infer(const std::string& model, const std::string& version, HttpRequest&& request,
             Responder respond);
  // `action`: "" (metadata), "ready", "config" or "stats".
  void Model(const std::string& model, const std::string& version, const std::string& action,
             const HttpRequest& request, Responder respond);
  // `action`: "index", "load" or "unload".
  void Repository(const std::string& model, const std::string& action, const HttpRequest& request,
                  Responder respond);
  // /v2/{system,cuda}sharedmemory[/region/<name>]/{status,register,unregister}.
  void SharedMemory(bool cuda, const std::string& region, const std::string& action,
                    const HttpRequest& request, Responder respond);
  // OpenAI (openai_routes.cc).
  void Embeddings(HttpRequest&& request, Responder respond);
  // GET /v1/models (`model` empty) and GET /v1/models/{model}.
  void OpenAiModels(const std::string& model, Responder respond);
  // TEI (tei_routes.cc). TeiInfo: `model` empty for the one text model served.
  void TeiEmbed(HttpRequest&& request, Responder respond);
  void TeiRerank(HttpRequest&& request, Responder respond);
  void TeiPredict(HttpRequest&& request, Responder respond);
  void TeiRoot(HttpRequest&& request, Responder respond);
  void TeiInfo(const std::string& model, Responder respond);
  void TeiHealth(Responder respond);
  // POST /tokenize: the model's tokens with their offsets, without running the model.
  void TeiTokenize(HttpRequest&& request, Responder respond);
  // Cohere/Jina (cohere_routes.cc): `api_version` 1 (/v1/rerank) or 2 (/v2/rerank).
  void CohereRerank(int api_version, HttpRequest&& request, Responder respond);

  engine::Engine* const engine_;
  ModelRepository* const repository_;
  const HttpRoutesOptions options_;
  // The text models' tokenizers, for /tokenize.
  TokenizerCache tokenizers_;
  RouteTable table_;
};

}  // namespace sluice::server::http
