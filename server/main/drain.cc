// ServerProcess's end: the wait for a signal, and the SIGTERM/SIGINT drain. Readiness goes false,
// new requests get UNAVAILABLE, queued and in-flight requests are answered (up to
// --exit-timeout-secs), then the front ends stop and the process exits 0 (kExitProcessFatal after
// a process-fatal device fault).

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>

#include "common/log.h"
#include "engine/engine.h"
#include "grpcpp/server.h"
#include "server/grpc_service.h"
#include "server/http/http_server.h"
#include "server/infer_conversion.h"
#include "server/listener_watchdog.h"
#include "server/main/server_flags.h"
#include "server/main/server_process.h"
#include "server/metrics_exporter.h"
#include "server/repository_poller.h"

namespace sluice::server {

int ServerProcess::WaitForSignal() {
  int signal_number = 0;
  for (;;) {
    sigwait(&signals_, &signal_number);
    if (signal_number != SIGUSR1 || process_fatal_.load()) break;
    LOG_WARNING(log_, "received SIGUSR1 with no device fault: ignored");
  }
  return signal_number;
}

int ServerProcess::Drain(int signal_number) {
  const bool fatal = process_fatal_.load();
  StopTakingWork(fatal, signal_number);
  const auto exit_deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(flags_.exit_timeout_secs);
  const bool idle = engine_->WaitIdle(std::chrono::seconds(flags_.exit_timeout_secs));
  if (!idle) {
    LOG_WARNING(log_, "exit timeout reached with requests still running; they are cancelled");
  }
  // Queued load/unload calls are answered UNAVAILABLE; a running one may finish until the exit
  // timeout. If it is still running then (a read blocked in a hung mount cannot be interrupted),
  // its caller has been answered and the process ends below with _exit() instead of joining the
  // thread (ModelControl::Stop says why; no thread is detached).
  const bool control_stopped = service_->StopModelControl(exit_deadline);
  if (!control_stopped) {
    LOG_WARNING(log_,
                "exit timeout reached with a model load/unload still running on the control "
                "thread; exiting without waiting for it");
  }
  // Every accepted request has been answered (Finish() called); give gRPC a moment to flush the
  // last answers and let streams end, then cancel what remains. (gRPC's Shutdown waits for the
  // whole grace period while any client keeps a connection open, so it is kept short.)
  grpc_server_->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  LogFinalStats();
  // Answers whatever the exit timeout cut short, so every reactor finishes and Wait() returns.
  engine_->Shutdown();
  grpc_server_->Wait();
  // Every HTTP request has been answered too (the engine is shut down), but answers may still be
  // waiting to be written or being written: they get what is left of the exit timeout (at least
  // the gRPC grace) before the I/O threads stop.
  if (http_server_ != nullptr) {
    http_server_->Stop(
        std::max(kShutdownGrace, std::chrono::duration_cast<std::chrono::milliseconds>(
                                     exit_deadline - std::chrono::steady_clock::now())));
  }
  if (!control_stopped) AbandonControlThread(fatal);
  metrics_.reset();  // Prometheus could watch the drain; now its HTTP server stops
  LOG_INFO_WAITING(log_, "sluice-server stopped",
                   fatal ? " after a process-fatal device fault" : "");
  // The logger's destructor (~ServerProcess) writes every queued record before the process exits.
  return fatal ? kExitProcessFatal : 0;
}

// Readiness (and after a device fault liveness) goes false, HTTP stops keeping connections
// alive, the watchdog stops, and the engine refuses new requests (UNAVAILABLE).
void ServerProcess::StopTakingWork(bool fatal, int signal_number) {
  if (fatal) {
    // Liveness first: the process cannot recover, so the orchestrator must restart it, and a
    // probe during the drain already says so.
    serving_.SetLive(false);
    LOG_ERROR(log_,
              "process-fatal device fault (logged above): liveness and readiness are "
              "NOT_SERVING; draining (exit timeout ",
              flags_.exit_timeout_secs, " s), then exiting with code ", kExitProcessFatal,
              " so that the process is restarted");
  } else {
    LOG_INFO_WAITING(log_, "received ", signal_number == SIGTERM ? "SIGTERM" : "SIGINT",
                     ": draining (exit timeout ", flags_.exit_timeout_secs, " s)");
  }
  serving_.SetReady(false);
  // HTTP answers from now on say Connection: close, and idle keep-alive connections are closed.
  if (http_server_ != nullptr) http_server_->BeginDrain();
  if (watchdog_ != nullptr) watchdog_->Stop();  // the drain closes the port; not a dead listener
  // No new loads from the repository poll; what it queued is answered by StopModelControl.
  if (poller_ != nullptr) poller_->Stop();
  engine_->BeginDrain();
}

// One line per model version with its final counts, for operators and for the drain tests.
void ServerProcess::LogFinalStats() {
  if (auto stats = engine_->GetStats("", -1); stats.ok()) {
    for (const auto& entry : *stats) {
      LOG_INFO_WAITING(log_, "final stats model=", entry.name, " version=", entry.version,
                       " success=", entry.stats.success.count, " failure=", entry.stats.fail.count);
      if (entry.stats.prepares) {  // its tokenizer, named as in ModelStatistics
        LOG_INFO_WAITING(log_, "final stats model=", entry.name, kTokenizerStatsSuffix,
                         " version=", entry.version,
                         " success=", entry.stats.preparation.success.count,
                         " failure=", entry.stats.preparation.fail.count);
      }
    }
  }
}

// Every call is answered and flushed, the stats are logged; what is left is a thread stuck in a
// system call, which no destructor may run under. Flush the log and end here.
void ServerProcess::AbandonControlThread(bool fatal) {
  metrics_.reset();
  LOG_INFO_WAITING(log_, "sluice-server stopped (control thread abandoned at the exit timeout)");
  logger_->Flush();
  std::fflush(nullptr);
  _exit(fatal ? kExitProcessFatal : 0);
}

}  // namespace sluice::server
