#pragma once

// ServerProcess: sluice-server from start-up to exit. Run() calls the start-up phases in order
// (server_process.cc), waits for a signal and drains (drain.cc):
//
//   signals blocked, logger  ->  device and engine  ->  shared-memory registry  ->  model
//   repository  ->  metrics exporter  ->  gRPC server  ->  HTTP routes, gRPC listener watchdog,
//   HTTP server  ->  model loads (ready), repository poller  ->  SIGTERM/SIGINT/SIGUSR1  ->  drain
//
// The order matters, and each phase's comment says why (e.g. metrics before the models load, so
// that a scrape during a long load sees the process; ports open before the loads, so that
// liveness answers while readiness waits). The members are declared in start-up order, so that
// they are destroyed in the reverse one: every part outlives the parts that borrow it.
//
// One per process, on main's thread. Not thread-safe; the threads it starts (logger, engine,
// exporter, watchdog, repository poller, gRPC and HTTP I/O) are stopped by the drain and the
// destructor.

#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>

#include "engine/device.h"
#include "server/serving_state.h"

namespace grpc {
class Server;
}

namespace sluice::common {
class Logger;
}

namespace sluice::engine {
class Engine;
struct EngineOptions;
}  // namespace sluice::engine

namespace sluice::server {

namespace http {
class HttpRoutes;
class HttpServer;
}  // namespace http
namespace shm {
class SharedMemoryRegistry;
}
class InferenceService;
class ListenerWatchdog;
class MetricsExporter;
class ModelRepository;
class NvmlGpuSource;
class RepositoryPoller;
struct ServerFlags;

class ServerProcess {
 public:
  // Exit code after a process-fatal device fault (engine/core/device_fault.h): the drain
  // completed, and the process must be restarted. (1: a run-time failure; 2: a bad flag or
  // config.)
  static constexpr int kExitProcessFatal = 3;

  // `flags` is borrowed and must outlive this object.
  explicit ServerProcess(const ServerFlags& flags);
  // Stops what the drain left running, in the reverse order of start-up.
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Starts the server, serves until SIGTERM or SIGINT (or a process-fatal device fault), drains,
  // and returns the process's exit code: 0 after a drain, kExitProcessFatal after a device fault,
  // 1 or 2 when start-up fails (the reason is logged). Does not return when a model load/unload
  // still runs at the exit timeout: the process then ends with _exit() (drain.cc says why).
  // Call once.
  int Run();

 private:
  // How long gRPC may take, once the engine is idle, to flush answers before calls are cancelled.
  static constexpr auto kShutdownGrace = std::chrono::milliseconds(1000);

  // Start-up phases (server_process.cc), in the order Run() calls them. Those returning int
  // return 0 to go on, or the process's exit code after logging why.
  void BlockShutdownSignals();
  void StartLogger();
  int StartEngine();
  engine::EngineOptions EngineOptionsFromFlags();
  int ArmFaultInjectionForTest(engine::EngineOptions& options);
  void CreateSharedMemory();
  int OpenRepository();
  int StartMetrics();
  int StartGrpc();
  void CreateHttpRoutes();
  void StartWatchdog();
  int StartHttp();
  void LoadModels();

  // The end (drain.cc): the signal, then the drain; Drain returns the exit code.
  int WaitForSignal();
  int Drain(int signal_number);
  void StopTakingWork(bool fatal, int signal_number);
  void LogFinalStats();
  [[noreturn]] void AbandonControlThread(bool fatal);

  const ServerFlags& flags_;
  // The shutdown signals (and SIGUSR1, a device fault), blocked in every thread: WaitForSignal()
  // takes them with sigwait().
  sigset_t signals_{};
  std::unique_ptr<common::Logger> logger_;
  common::Logger* log_ = nullptr;  // logger_.get()
  rlim_t fd_limit_ = 0;            // the soft RLIMIT_NOFILE in force
  std::optional<engine::DeviceSelection> device_;
  // Set by the engine's on_process_fatal hook (any thread) before it wakes main with SIGUSR1.
  std::atomic<bool> process_fatal_{false};
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<shm::SharedMemoryRegistry> shared_memory_;
  // Liveness, readiness and the open inference calls, one owner for every protocol: the service
  // (gRPC) and the routes (HTTP) answer and count in it, the exporter reads it, this object sets
  // it.
  ServingState serving_;
  // Outlives the exporter, which reads the models' states from it.
  std::unique_ptr<ModelRepository> repository_;
  std::unique_ptr<NvmlGpuSource> gpu_source_;  // outlives the exporter, which borrows it
  std::unique_ptr<MetricsExporter> metrics_;
  bool explicit_mode_ = false;  // --model-control-mode=explicit
  std::unique_ptr<InferenceService> service_;
  // --model-control-mode=poll: submits to the service's control thread, so it is declared after
  // (destroyed before) the service; the drain stops it first.
  std::unique_ptr<RepositoryPoller> poller_;
  std::unique_ptr<grpc::Server> grpc_server_;
  int grpc_port_ = 0;
  std::unique_ptr<ListenerWatchdog> watchdog_;
  std::unique_ptr<http::HttpRoutes> routes_;
  std::unique_ptr<http::HttpServer> http_server_;
};

}  // namespace sluice::server
