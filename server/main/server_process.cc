#include "server/main/server_process.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/pem_file.h"
#include "engine/engine.h"
#include "engine/fault_injection.h"
#include "grpcpp/server.h"
#include "server/grpc_service.h"
#include "server/http/http_routes.h"
#include "server/http/http_server.h"
#include "server/listener_watchdog.h"
#include "server/main/grpc_server_builder.h"
#include "server/main/server_flags.h"
#include "server/metrics_exporter.h"
#include "server/model_repository.h"
#include "server/nvml_gpu_source.h"
#include "server/repository_poller.h"
#include "server/shared_memory/shared_memory_registry.h"

namespace sluice::server {
namespace {

// Raises the soft RLIMIT_NOFILE to the hard limit (a connection burst needs descriptors; the
// default soft limit, 1024, was exhausted by ~1,015 idle connections) and logs both. Returns the
// soft limit in force.
rlim_t RaiseFdLimit(common::Logger* log) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    LOG_WARNING(log, "cannot read the fd limit (RLIMIT_NOFILE): ", std::strerror(errno));
    return 1024;
  }
  const rlim_t before = limit.rlim_cur;
  if (limit.rlim_cur != limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      LOG_WARNING(log, "cannot raise the soft fd limit to ", limit.rlim_max, ": ",
                  std::strerror(errno));
      limit.rlim_cur = before;
    }
  }
  LOG_INFO_WAITING(log, "fd limit (RLIMIT_NOFILE): soft ", before, " -> ", limit.rlim_cur,
                   ", hard ", limit.rlim_max);
  return limit.rlim_cur;
}

// The transport the "listening" lines name: the same TLS flags serve gRPC and HTTP.
const char* TransportName(const ServerFlags& flags) {
  return flags.tls_cert.empty() ? "plaintext" : flags.tls_ca.empty() ? "TLS" : "mutual TLS";
}

// A start-up failure's exit code: 2 for a bad flag or config, 1 for a run-time failure.
int ExitCodeFor(const absl::Status& status) {
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

ServerProcess::ServerProcess(const ServerFlags& flags) : flags_(flags) {}

ServerProcess::~ServerProcess() = default;

int ServerProcess::Run() {
  BlockShutdownSignals();
  StartLogger();
  fd_limit_ = RaiseFdLimit(log_);
  if (int code = StartEngine(); code != 0) return code;
  CreateSharedMemory();
  if (int code = OpenRepository(); code != 0) return code;
  if (int code = StartMetrics(); code != 0) return code;
  if (int code = StartGrpc(); code != 0) return code;
  CreateHttpRoutes();
  StartWatchdog();
  if (int code = StartHttp(); code != 0) return code;
  LoadModels();
  return Drain(WaitForSignal());
}

void ServerProcess::BlockShutdownSignals() {
  // A do-nothing handler instead of the default action (termination): should a library thread
  // ever run with these signals unblocked, a second SIGTERM delivered to it during the drain must
  // not kill the process (seen: 1 in ~200 double-SIGTERM cycles exited 143 before the fix). Not
  // SIG_IGN, which would discard the signal before sigwait() could take it.
  struct sigaction ignore_softly {};
  ignore_softly.sa_handler = [](int) {};
  sigemptyset(&ignore_softly.sa_mask);
  sigaction(SIGTERM, &ignore_softly, nullptr);
  sigaction(SIGINT, &ignore_softly, nullptr);
  sigaction(SIGUSR1, &ignore_softly, nullptr);
  // Block the shutdown signals in every thread (this runs before any thread starts, and threads
  // inherit the mask); main waits for them with sigwait() (WaitForSignal). SIGUSR1 is the
  // engine's process-fatal device fault waking main (EngineOptionsFromFlags).
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGTERM);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
}

void ServerProcess::StartLogger() {
  common::LoggerOptions log_options;
  log_options.min_level = *common::ParseLogLevel(flags_.log_level);
  log_options.format = *common::ParseLogFormat(flags_.log_format);
  log_options.queue_capacity = static_cast<size_t>(flags_.log_queue_capacity);
  logger_ = std::make_unique<common::Logger>(log_options);
  log_ = logger_.get();
  // main serves no request, so its own lines (ports, "server ready", shutdown) wait for room in
  // the log queue rather than being dropped: LOG_INFO_WAITING. Scripts and tests rely on them.

  LOG_INFO_WAITING(log_, "sluice-server ", SLUICE_VERSION,
                   " starting (memory allocator: ", SLUICE_MALLOC_NAME, ")");
}

int ServerProcess::StartEngine() {
  absl::StatusOr<engine::DeviceSelection> device = engine::SelectDevice(flags_.device);
  if (!device.ok()) {
    LOG_ERROR(log_, device.status().message(), " (use --device=auto or --device=cpu)");
    return 2;
  }
  device_ = *std::move(device);
  LOG_INFO_WAITING(log_, device_->description);

  engine::EngineOptions engine_options = EngineOptionsFromFlags();
  if (int code = ArmFaultInjectionForTest(engine_options); code != 0) return code;
  absl::StatusOr<std::unique_ptr<engine::Engine>> engine = engine::Engine::Create(engine_options);
  if (!engine.ok()) {
    LOG_ERROR(log_, "engine: ", engine.status().message());
    return 1;
  }
  engine_ = *std::move(engine);
  return 0;
}

engine::EngineOptions ServerProcess::EngineOptionsFromFlags() {
  engine::EngineOptions engine_options;
  engine_options.logger = log_;
  engine_options.device = *device_;
  engine_options.default_max_queue_size = flags_.max_queue_size;
  engine_options.executor_slots = flags_.executor_slots;
  engine_options.gpu_executor_slots = flags_.gpu_executor_slots;
  engine_options.cpu_single_instance_on_batcher = flags_.cpu_batcher_runs_batches;
  engine_options.preparation_threads = flags_.tokenizer_threads;
  engine_options.compute_threads = flags_.compute_threads;
  engine_options.preparation_queue_size = flags_.tokenizer_queue_size;
  // The collector's readings are only published as metrics, so it runs only with them.
  engine_options.stats_interval =
      std::chrono::milliseconds(flags_.allow_metrics ? flags_.metrics_interval_ms : 0);
  engine_options.access_log_sample_rate = flags_.access_log_sample_rate;
  // A sticky device error (engine/core/device_fault.h): the engine has failed every model and
  // stopped taking requests; main, woken by SIGUSR1, turns liveness and readiness false, drains and
  // exits with kExitProcessFatal so that the orchestrator restarts the process.
  engine_options.on_process_fatal = [&process_fatal = process_fatal_](const absl::Status&) {
    process_fatal.store(true);
    kill(getpid(), SIGUSR1);  // blocked in every thread: main's sigwait() takes it
  };
  return engine_options;
}

// Test-only (engine/fault_injection.h): armed by the environment alone, and said loudly.
int ServerProcess::ArmFaultInjectionForTest(engine::EngineOptions& options) {
  const char* inject = std::getenv(engine::kFaultInjectionEnvVar);
  if (inject == nullptr || *inject == '\0') return 0;
  absl::StatusOr<engine::FaultInjectionSpec> spec = engine::ParseFaultInjectionSpecForTest(inject);
  if (!spec.ok()) {
    LOG_ERROR(log_, spec.status().message());
    return 2;
  }
  LOG_WARNING(log_, "TEST-ONLY FAULT INJECTION ARMED (", engine::kFaultInjectionEnvVar, "=", inject,
              "): model '", spec->model, "' will fault after ", spec->after_batches,
              " batches; never set this in production");
  options.before_batch_for_test = engine::MakeFaultInjectionHookForTest(*spec);
  return 0;
}

// Shared-memory regions, for gRPC and HTTP alike; before the exporter, which reads its stats.
// CUDA regions need the server to run on a GPU (IPC handles open on a device).
void ServerProcess::CreateSharedMemory() {
  shm::SharedMemoryRegistryOptions shm_options;
  shm_options.max_regions = flags_.shared_memory_max_regions;
  shm_options.max_mapped_bytes = static_cast<uint64_t>(flags_.shared_memory_max_bytes);
  if (device_->kind == engine::DeviceSelection::Kind::kCuda) {
    shm_options.open_cuda_ipc = engine::OpenCudaIpcMemory;
  } else {
    shm_options.cuda_unavailable_reason =
        absl::StrCat("this server runs its models on the CPU (", device_->description,
                     "); CUDA IPC handles can only be opened on a GPU");
  }
  shared_memory_ = std::make_unique<shm::SharedMemoryRegistry>(std::move(shm_options));
}

// Metrics before gRPC and before the models load: a scrape during a long load sees the process.
int ServerProcess::StartMetrics() {
  if (!flags_.allow_metrics) {
    LOG_INFO_WAITING(log_, "metrics disabled (--allow-metrics=false)");
    return 0;
  }
  MetricsExporterOptions metrics_options;
  metrics_options.address = flags_.metrics_address;
  metrics_options.port = flags_.metrics_port;
  metrics_options.http_threads = static_cast<size_t>(flags_.metrics_http_threads);
  metrics_options.request_timeout_ms = flags_.metrics_request_timeout_ms;
  // GPU memory and utilization (sluice_gpu_*) where the NVIDIA driver's NVML is present.
  if (absl::StatusOr<std::unique_ptr<NvmlGpuSource>> nvml = NvmlGpuSource::Open(); nvml.ok()) {
    gpu_source_ = *std::move(nvml);
    LOG_INFO_WAITING(log_, "GPU metrics from NVML (", gpu_source_->device_count(), " GPUs)");
  } else {
    LOG_INFO_WAITING(log_, "no GPU metrics: ", nvml.status().message());
  }
  metrics_options.gpu_source = gpu_source_.get();
  metrics_options.active_infer_calls = &serving_.grpc_infer_calls();
  if (flags_.allow_http) {
    metrics_options.active_http_infer_requests = &serving_.http_infer_requests();
  }
  // Every model asked to load, failed ones included (sluice_model_state).
  metrics_options.model_states = [&repository = *repository_] {
    std::vector<ModelStateSample> samples;
    for (ModelRepository::IndexEntry& entry : repository.RequestedModelStates()) {
      samples.push_back({.model = std::move(entry.name),
                         .version = std::move(entry.version),
                         .state = std::move(entry.state)});
    }
    return samples;
  };
  metrics_options.shared_memory = [&shared_memory = *shared_memory_] {
    const shm::SharedMemoryStats stats = shared_memory.Stats();
    return SharedMemorySample{.system_regions = stats.system_regions,
                              .cuda_regions = stats.cuda_regions,
                              .mapped_bytes = stats.mapped_bytes,
                              .draining_regions = stats.draining_regions};
  };
  absl::StatusOr<std::unique_ptr<MetricsExporter>> exporter =
      MetricsExporter::Start(*engine_, log_, metrics_options);
  if (!exporter.ok()) {
    LOG_ERROR(log_, exporter.status().message(),
              "; choose another --metrics-port, or --allow-metrics=false");
    return 1;
  }
  metrics_ = *std::move(exporter);
  // Tests and scripts read this line to find a port picked with --metrics-port=0.
  LOG_INFO_WAITING(log_, "metrics listening on ", flags_.metrics_address, ":", metrics_->port(),
                   "/metrics metrics_port=", metrics_->port(), " collector interval ",
                   flags_.metrics_interval_ms, " ms");
  return 0;
}

// Before the metrics exporter, which reads the models' states from it; no model loads yet.
int ServerProcess::OpenRepository() {
  RepositoryOptions repository_options;
  repository_options.load_limits = flags_.load_limits;
  repository_options.max_config_bytes = flags_.max_config_bytes;
  repository_options.allow_symlinks_out_of_repository = flags_.allow_symlinks_out_of_repository;
  // gRPC's health service is told of readiness; with strict readiness it moves with the models.
  repository_options.on_models_changed = [&serving = serving_] { serving.ModelsChanged(); };
  absl::StatusOr<std::unique_ptr<ModelRepository>> repository = ModelRepository::Create(
      flags_.model_repository, engine_.get(), log_, std::move(repository_options));
  if (!repository.ok()) {
    LOG_ERROR(log_, repository.status().message());
    return 1;
  }
  repository_ = *std::move(repository);
  if (!flags_.model_repository_given) {
    // A server started from any folder without the flag serves the examples of the tree it was
    // built from: say which folder, and how to choose another, before anything loads.
    LOG_WARNING(log_, "no --model-repository given: serving the bundled example models in ",
                repository_->root(),
                " (the source tree this server was built from); choose another folder with "
                "--model-repository=<folder> or SLUICE_MODEL_REPOSITORY");
  }
  if (flags_.strict_readiness) {
    serving_.set_models_ready([&repository = *repository_] { return repository.AllModelsReady(); });
  }

  explicit_mode_ = flags_.model_control_mode == "explicit";
  if (flags_.model_control_mode != "poll" && flags_.repository_poll_secs_given) {
    LOG_WARNING(log_, "--repository-poll-secs is ignored: it needs --model-control-mode=poll");
  }
  if (!explicit_mode_ && !flags_.load_models.empty()) {
    LOG_ERROR(log_, "--load-model needs --model-control-mode=explicit");
    return 2;
  }
  return 0;
}

int ServerProcess::StartGrpc() {
  ServiceOptions service_options;
  service_options.explicit_model_control = explicit_mode_;
  service_options.server_version = SLUICE_VERSION;
  service_options.serving = &serving_;
  service_options.model_control_queue_size = flags_.model_control_queue_size;
  service_options.max_stream_pending_bytes = flags_.grpc_max_stream_pending_bytes;
  service_options.max_connection_pending_bytes = flags_.grpc_max_connection_pending_bytes;
  service_options.max_pending_stream_bytes_total = flags_.grpc_max_pending_stream_bytes_total;
  service_options.shared_memory = shared_memory_.get();
  service_ = std::make_unique<InferenceService>(engine_.get(), repository_.get(), service_options);

  absl::StatusOr<GrpcServer> started = StartGrpcServer(flags_, fd_limit_, *service_, log_);
  if (!started.ok()) {
    LOG_ERROR(log_, started.status().message());
    return ExitCodeFor(started.status());
  }
  grpc_server_ = std::move(started->server);
  grpc_port_ = started->port;
  FollowServingState(*grpc_server_, serving_);
  serving_.SetLive(true);
  // Tests and scripts read this line to find a port picked with --grpc-port=0.
  LOG_INFO_WAITING(log_, "gRPC listening on ", flags_.grpc_address, ":", grpc_port_, " (",
                   TransportName(flags_), ") grpc_port=", grpc_port_);
  return 0;
}

// The HTTP/REST routes (the server starts in StartHttp), over the same engine and repository;
// same TLS flags as gRPC.
void ServerProcess::CreateHttpRoutes() {
  http::HttpRoutesOptions routes_options;
  routes_options.explicit_model_control = explicit_mode_;
  routes_options.model_control = service_->model_control();
  routes_options.server_version = SLUICE_VERSION;
  routes_options.max_json_bytes = static_cast<size_t>(flags_.http_max_json_bytes);
  routes_options.text_limits.max_client_batch_size =
      static_cast<size_t>(flags_.text_max_client_batch_size);
  routes_options.text_limits.max_rerank_documents =
      static_cast<size_t>(flags_.text_max_rerank_documents);
  routes_options.serving = &serving_;
  routes_options.shared_memory = shared_memory_.get();
  routes_ = std::make_unique<http::HttpRoutes>(engine_.get(), repository_.get(), routes_options);
}

// The watchdog calls the port over loopback whatever address it is bound to (a wildcard or a
// loopback address; a specific other address is called as given).
void ServerProcess::StartWatchdog() {
  if (flags_.grpc_watchdog_interval_ms <= 0) return;
  ListenerWatchdogOptions watchdog_options;
  std::string host = flags_.grpc_address;
  if (host == "0.0.0.0" || host.empty()) host = "127.0.0.1";
  if (host == "::" || host == "[::]") host = "[::1]";
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
  watchdog_options.target = absl::StrCat(host, ":", grpc_port_);
  watchdog_options.interval = std::chrono::milliseconds(flags_.grpc_watchdog_interval_ms);
  watchdog_options.probe_timeout = std::chrono::milliseconds(flags_.grpc_watchdog_timeout_ms);
  watchdog_options.failures_to_trip = flags_.grpc_watchdog_failures;
  watchdog_options.logger = log_;
  // Liveness on every protocol follows the gRPC listener: an orchestrator probing HTTP restarts
  // a process whose gRPC port died just as one probing gRPC does.
  watchdog_options.on_change = [&serving = serving_,
                                &process_fatal = process_fatal_](bool accepting) {
    serving.SetLive(accepting && !process_fatal.load());  // a dead device stays dead
  };
  watchdog_ = ListenerWatchdog::Start(std::move(watchdog_options));
}

// The HTTP/REST front end's server, over the routes (CreateHttpRoutes); same TLS flags as gRPC.
int ServerProcess::StartHttp() {
  if (!flags_.allow_http) {
    LOG_INFO_WAITING(log_, "HTTP disabled (--allow-http=false)");
    return 0;
  }
  http::HttpServerOptions http_options;
  http_options.address = flags_.http_address;
  http_options.port = flags_.http_port;
  http_options.threads = flags_.http_threads;
  http_options.max_connections = flags_.http_max_connections;
  // --max-request-bytes bounds every protocol; --http-max-body-bytes (default 256 MiB) keeps
  // HTTP's own bound sane when that one is left at gRPC's 2 GiB.
  const bool http_bound = flags_.http_max_body_bytes <= flags_.grpc_max_message_bytes;
  http_options.max_body_bytes = static_cast<uint64_t>(http_bound ? flags_.http_max_body_bytes
                                                                 : flags_.grpc_max_message_bytes);
  http_options.max_body_bytes_flag = http_bound ? "--http-max-body-bytes" : "--max-request-bytes";
  http_options.max_inflight_body_bytes = static_cast<uint64_t>(flags_.http_max_inflight_bytes);
  http_options.idle_timeout_ms = flags_.http_idle_timeout_ms;
  http_options.header_timeout_ms = flags_.http_header_timeout_ms;
  http_options.body_timeout_ms = flags_.http_body_timeout_ms;
  if (!flags_.tls_cert.empty()) {
    // StartGrpcServer() already checked that the files go together and read them.
    http_options.tls_cert_pem = *common::ReadPemFile("--tls-cert", flags_.tls_cert);
    http_options.tls_key_pem = *common::ReadPemFile("--tls-key", flags_.tls_key);
    if (!flags_.tls_ca.empty()) {
      http_options.tls_ca_pem = *common::ReadPemFile("--tls-ca", flags_.tls_ca);
    }
  }
  http::HttpRoutes& routes = *routes_;
  http_options.error_body = [&routes](absl::string_view target, int status,
                                      absl::string_view message) {
    return routes.ErrorBody(target, status, message);
  };
  absl::StatusOr<std::unique_ptr<http::HttpServer>> started = http::HttpServer::Start(
      std::move(http_options), [&routes](http::HttpRequest&& request, http::Responder respond) {
        routes.Handle(std::move(request), std::move(respond));
      });
  if (!started.ok()) {
    LOG_ERROR(log_, started.status().message(),
              "; choose another --http-port, or --allow-http=false");
    grpc_server_->Shutdown();
    return 1;
  }
  http_server_ = *std::move(started);
  // Tests and scripts read this line to find a port picked with --http-port=0.
  LOG_INFO_WAITING(log_, "HTTP listening on ", flags_.http_address, ":", http_server_->port(), " (",
                   TransportName(flags_), ", ", flags_.http_threads,
                   " I/O threads) http_port=", http_server_->port());
  return 0;
}

// Models load after the ports are open: liveness answers during a long load, readiness waits.
// In poll mode the poller takes the folders' fingerprints before the loads (a folder changed
// during them is reloaded by the next scans) and starts after them; it submits its loads and
// unloads to the control thread that the load/unload RPCs use.
void ServerProcess::LoadModels() {
  if (flags_.model_control_mode == "poll") {
    RepositoryPollerOptions poller_options;
    poller_options.interval = std::chrono::seconds(flags_.repository_poll_secs);
    poller_ = std::make_unique<RepositoryPoller>(repository_.get(), service_->model_control(), log_,
                                                 poller_options);
    poller_->Baseline();
  }
  const std::vector<std::string> failed =
      explicit_mode_ ? repository_->LoadListed(flags_.load_models) : repository_->LoadAll();
  if (poller_ != nullptr) {
    poller_->Start();
    LOG_INFO_WAITING(log_, "polling the repository every ", flags_.repository_poll_secs,
                     " s for new, changed and removed model folders (--repository-poll-secs)");
  }
  if (!failed.empty()) {
    // Each failure was logged with its reason as it happened; this line names them together.
    LOG_WARNING(log_, failed.size(), " model(s) failed to load: ", absl::StrJoin(failed, ", "),
                "; the reasons are in the lines above and in the repository index",
                flags_.strict_readiness ? " (not ready: --strict-readiness)" : "");
  }
  // A process-fatal device fault during the loads (its SIGUSR1 waits for the sigwait in
  // WaitForSignal) leaves readiness false.
  serving_.SetReady(!process_fatal_.load());
  // Scripts and tests wait for one of these two lines: start-up is done either way.
  if (serving_.ready() || process_fatal_.load()) {
    LOG_INFO_WAITING(log_, "server ready: repository ", repository_->root(), ", model control ",
                     flags_.model_control_mode);
  } else {
    LOG_INFO_WAITING(log_,
                     "server started, not ready: a model it was asked to load is not ready "
                     "(--strict-readiness; see the repository index); repository ",
                     repository_->root(), ", model control ", flags_.model_control_mode);
  }
}

}  // namespace sluice::server
