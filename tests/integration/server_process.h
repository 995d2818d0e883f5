#pragma once

// ServerProcess: runs the real `sluice-server` binary as a child process on a free loopback port
// (--grpc-port=0, the bound port read from its log), for integration tests. Its metrics port is
// picked freely too (SLUICE_METRICS_PORT=0 in its environment unless the test's own environment
// sets it; a --metrics-port in `args` wins), so servers started in parallel never collide on 8002.

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sluice::testing {

class ServerProcess {
 public:
  // Starts the server with `args` added to --grpc-address=127.0.0.1 --grpc-port=0
  // --http-address=127.0.0.1 --http-port=0 (each unless `args` sets it), and waits
  // (up to `timeout`) until it has logged "server ready" (models loaded) or "server started, not
  // ready" (start-up done, a model failed, --strict-readiness). Error if it exits first or never
  // gets there; the message carries its log.
  // `fd_limit` > 0 sets the child's RLIMIT_NOFILE, soft and hard, before it runs (the server
  // raises its soft limit to the hard one).
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      std::vector<std::string> args, std::chrono::seconds timeout = std::chrono::seconds(30),
      int fd_limit = 0);
  // Kills the process if it still runs. Adds a gtest failure, with the log, if the server's log
  // holds a sanitizer report (sanitizer builds, scripts/sanitize.sh).
  ~ServerProcess();

  int port() const { return port_; }
  // The HTTP/REST port it logged (http_port=N; started with --http-port=0); 0 if HTTP is off.
  int http_port() const { return http_port_; }
  // The metrics port it logged (metrics_port=N); 0 if metrics are off (--allow-metrics=false).
  int metrics_port() const { return metrics_port_; }
  // "127.0.0.1:<port>"
  std::string address() const;
  pid_t pid() const { return pid_; }

  // Sends `signal` (SIGTERM by default) and waits up to `timeout` for the exit; returns the exit
  // code (128 + signal number if a signal killed it). DeadlineExceeded if it did not exit.
  absl::StatusOr<int> Stop(std::chrono::seconds timeout = std::chrono::seconds(30),
                           int signal = 15);

  // Everything the server logged so far.
  std::string Log() const;

 private:
  ServerProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}

  pid_t pid_;
  std::string log_path_;
  int port_ = 0;
  int metrics_port_ = 0;
  int http_port_ = 0;
  bool exited_ = false;
};

// Path of the sluice-server binary under test: $SLUICE_TEST_SERVER_BINARY when set, else the
// build tree's.
std::string ServerBinary();
// The bundled model repository: $SLUICE_TEST_MODEL_REPOSITORY when set, else models/ of the source
// tree.
std::string BundledModelRepository();

}  // namespace sluice::testing
