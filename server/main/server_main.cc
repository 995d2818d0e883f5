// sluice-server: the process. Parses the flags (server_flags.h) and runs ServerProcess
// (server_process.h): logger, engine, model repository, gRPC and HTTP servers, and the
// SIGTERM/SIGINT drain: readiness goes false, new requests get UNAVAILABLE, queued and in-flight
// requests are answered (up to --exit-timeout-secs), then the process exits 0.

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "server/main/server_flags.h"
#include "server/main/server_process.h"

int main(int argc, char** argv) {
  // gRPC locks absl::Mutex on every call. Debian's Abseil is built without NDEBUG, so its
  // deadlock detection is on by default: every lock then updates a process-wide lock graph under
  // a global lock (2-4% of the server's CPU at concurrency 1, measured with perf). It checks
  // gRPC's locks, not ours (common::Mutex is a std::mutex); TSan builds check ours.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{
      "sluice-server: a KServe v2 (Open Inference Protocol) inference server, gRPC and "
      "HTTP/REST.\n"
      "Serves the models of a Triton-style model repository; every flag also reads the\n"
      "environment variable named beside it."};
  app.set_version_flag("--version", SLUICE_VERSION);
  sluice::server::ServerFlags flags;
  sluice::server::AddServerFlags(app, flags);
  CLI11_PARSE(app, argc, argv);
  return sluice::server::ServerProcess(flags).Run();
}
