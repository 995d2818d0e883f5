#pragma once

// ServingState: what every front end reports about the process, with one owner (main): liveness,
// readiness, and the inference calls open on each protocol. gRPC's InferenceService and the HTTP
// routes read it (ServerLive/ServerReady, /v2/health/*, TEI's /health, ...) and count their calls
// in it; the metrics exporter reads the counts (sluice_grpc_infer_calls_active,
// sluice_http_infer_requests_active); main writes liveness and readiness. Front ends never keep
// flags or counters of their own, so every protocol answers the same.
//
// Thread-safe: atomics, and one mutex that keeps the announcements to on_change in order (a
// readiness computed before a change is never announced after it). Owned by main; borrowed by
// everything else, which it outlives.

#include <atomic>
#include <cstdint>
#include <functional>

#include "common/mutex.h"

namespace sluice::server {

class ServingState {
 public:
  // Counts one open inference call from construction to destruction (answered, or refused before
  // the engine saw it). Movable into a shared_ptr that the completion callback holds.
  class ActiveCall {
   public:
    explicit ActiveCall(std::atomic<int64_t>& counter) : counter_(counter) {
      counter_.fetch_add(1, std::memory_order_relaxed);
    }
    ~ActiveCall() { counter_.fetch_sub(1, std::memory_order_relaxed); }
    ActiveCall(const ActiveCall&) = delete;
    ActiveCall& operator=(const ActiveCall&) = delete;

   private:
    std::atomic<int64_t>& counter_;
  };

  // Live: true from start until the gRPC listener dies or the device fails (then an orchestrator
  // restarts the process). Ready: false until start-up loading is done, and again while draining;
  // with a models-ready check (--strict-readiness, set_models_ready) also while that check says
  // false: some model asked to load is not ready.
  bool live() const { return live_.load(std::memory_order_acquire); }
  bool ready() const;
  void SetLive(bool live);
  void SetReady(bool ready);
  // Called after every SetLive/SetReady/ModelsChanged with the new (live, ready()), on the
  // caller's thread; main sets it before any front end starts (gRPC's health service follows it).
  // Not thread-safe to set later.
  void set_on_change(std::function<void(bool live, bool ready)> on_change) {
    on_change_ = std::move(on_change);
  }
  // Strict readiness: ready() is also `models_ready()` (ModelRepository::AllModelsReady), asked on
  // every ready() call (readiness probes), on the caller's thread; it must be thread-safe and
  // must not call back into this object. Empty (the default, --strict-readiness=false): ready as
  // soon as start-up is done. Set by main before any front end starts; not thread-safe to set
  // later.
  void set_models_ready(std::function<bool()> models_ready) {
    models_ready_ = std::move(models_ready);
  }
  // A model was loaded or unloaded: calls on_change with the current (live, ready()), so that
  // pushed readiness (gRPC's health service) follows the models as the pulled one does.
  void ModelsChanged();

  // Inference calls open on gRPC (unary and streamed requests) and on HTTP (every route).
  std::atomic<int64_t>& grpc_infer_calls() { return grpc_infer_calls_; }
  std::atomic<int64_t>& http_infer_requests() { return http_infer_requests_; }

 private:
  void Announce();

  std::atomic<bool> live_{true};
  std::atomic<bool> ready_{false};
  std::atomic<int64_t> grpc_infer_calls_{0};
  std::atomic<int64_t> http_infer_requests_{0};
  std::function<void(bool, bool)> on_change_;
  std::function<bool()> models_ready_;
  // Held while a new (live, ready) is computed and announced to on_change_.
  common::Mutex announce_mu_;
};

}  // namespace sluice::server
