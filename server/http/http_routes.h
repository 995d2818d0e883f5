#pragma once

// HttpRoutes: the KServe v2 HTTP/REST endpoints (Open Inference Protocol, plus Triton's
// model-repository, configuration and statistics extensions) over the same engine and model
// repository as the gRPC service. Handle() returns at once: an infer is converted, validated and
// submitted, and the engine's completion thread answers it; load/unload run on this object's
// control thread (they block for as long as loading takes); everything else is answered inline.
//
// Also OpenAI's embeddings API (issue 21) under /v1: `POST /v1/embeddings` on encoder models with
// an `embedding` output, `GET /v1/models[/{id}]`, with OpenAI's error shape (openai_routes.cc).

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
#include "server/model_control.h"
#include "server/model_repository.h"

namespace sluice::server::shm {
class SharedMemoryRegistry;
}

namespace sluice::server::http {

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
  // Borrowed, nullable, must outlive the routes: counts infer requests received and not yet
  // answered (sluice_http_infer_requests_active).
  std::atomic<int64_t>* active_infer_requests = nullptr;

  // The process's shared-memory regions, shared with gRPC (/v2/systemsharedmemory/...,
  // /v2/cudasharedmemory/...); borrowed, nullable (then those routes answer 501 and requests
  // naming a region are refused), must outlive the routes.
  shm::SharedMemoryRegistry* shared_memory = nullptr;
  // Bounds of POST /v1/embeddings (inputs per request, tokens per input, bytes per string); the
  // body is also bounded by max_json_bytes.
  openai::EmbeddingsLimits embeddings_limits;
};

// Thread-safe; the HTTP server calls Handle() from its I/O threads.
class HttpRoutes {
 public:
  // `engine` and `repository` are borrowed and must outlive this object.
  HttpRoutes(engine::Engine* engine, ModelRepository* repository, HttpRoutesOptions options);
  ~HttpRoutes() = default;
  HttpRoutes(const HttpRoutes&) = delete;
  HttpRoutes& operator=(const HttpRoutes&) = delete;

  // GET /v2/health/ready answers this (false until start-up loading is done, and while draining).
  void SetReady(bool ready) { ready_.store(ready); }
  // GET /v2/health/live answers this (true until the gRPC listener watchdog finds the port dead,
  // as gRPC's ServerLive does).
  void SetLive(bool live) { live_.store(live); }

  // The HttpServer's Handler.
  void Handle(HttpRequest&& request, Responder respond);

 private:
  void Infer(const std::string& model, const std::string& version, HttpRequest&& request,
             Responder respond);
  void Model(const std::string& model, const std::string& version, const std::string& action,
             const HttpRequest& request, Responder respond);
  void Repository(const std::string& model, const std::string& action, const HttpRequest& request,
                  Responder respond);
  // /v2/{system,cuda}sharedmemory[/region/<name>]/{status,register,unregister}.
  void SharedMemory(bool cuda, const std::string& region, const std::string& action,
                    const HttpRequest& request, Responder respond);
  // /v1/...: OpenAI's API (openai_routes.cc). `segments` are the decoded path segments.
  void OpenAi(const std::vector<std::string>& segments, HttpRequest&& request, Responder respond);
  void Embeddings(HttpRequest&& request, Responder respond);

  engine::Engine* const engine_;
  ModelRepository* const repository_;
  const HttpRoutesOptions options_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> live_{true};
};

}  // namespace sluice::server::http
