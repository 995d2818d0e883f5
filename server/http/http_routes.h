#pragma once

// HttpRoutes: the KServe v2 HTTP/REST endpoints (Open Inference Protocol, plus Triton's
// model-repository, configuration and statistics extensions) over the same engine and model
// repository as the gRPC service. Handle() returns at once: an infer is converted, validated and
// submitted, and the engine's completion thread answers it; load/unload run on this object's
// control thread (they block for as long as loading takes); everything else is answered inline.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "engine/engine.h"
#include "server/http/http_server.h"
#include "server/model_repository.h"

namespace sluice::server::http {

struct HttpRoutesOptions {
  // load/unload are refused unless this is set (--model-control-mode=explicit), as on gRPC.
  bool explicit_model_control = false;
  // Reported by GET /v2.
  std::string server_version = "0.1.0";
};

// Thread-safe; the HTTP server calls Handle() from its I/O threads.
class HttpRoutes {
 public:
  // `engine` and `repository` are borrowed and must outlive this object.
  HttpRoutes(engine::Engine* engine, ModelRepository* repository, HttpRoutesOptions options);
  // Runs the pending load/unload tasks to completion, then joins the control thread.
  ~HttpRoutes();
  HttpRoutes(const HttpRoutes&) = delete;
  HttpRoutes& operator=(const HttpRoutes&) = delete;

  // GET /v2/health/ready answers this (false until start-up loading is done, and while draining).
  void SetReady(bool ready) { ready_.store(ready); }

  // The HttpServer's Handler.
  void Handle(HttpRequest&& request, Responder respond);

 private:
  void Infer(const std::string& model, const std::string& version, HttpRequest&& request,
             Responder respond);
  void Model(const std::string& model, const std::string& version, const std::string& action,
             const HttpRequest& request, Responder respond);
  void Repository(const std::string& model, const std::string& action, const HttpRequest& request,
                  Responder respond);
  void RunOnControlThread(std::function<void()> task);
  void ControlLoop();

  engine::Engine* const engine_;
  ModelRepository* const repository_;
  const HttpRoutesOptions options_;
  std::atomic<bool> ready_{false};

  std::mutex control_mu_;
  std::condition_variable control_cv_;
  std::deque<std::function<void()>> control_tasks_;  // guarded by control_mu_
  bool control_stop_ = false;                        // guarded by control_mu_
  std::thread control_thread_;
};

}  // namespace sluice::server::http
