#pragma once

// sluice-server's command line: every flag, its environment variable, default, check and help
// text, in the groups `--help` shows them in. ServerFlags holds the parsed values; the start-up
// phases (server_process.h) read them and nothing else.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/load_limits.h"
#include "server/grpc_service.h"
#include "server/model_repository.h"
#include "server/shared_memory/shared_memory_registry.h"

// Both set by server/main/CMakeLists.txt; these are the fallbacks of a build without them.
#ifndef SLUICE_DEFAULT_MODEL_REPOSITORY
#define SLUICE_DEFAULT_MODEL_REPOSITORY "models"
#endif
#ifndef SLUICE_VERSION
#define SLUICE_VERSION "0.0.0"
#endif

namespace CLI {
class App;
}

namespace sluice::server {

// The parsed command line, one field per flag (the flag's name with dashes as underscores, and
// its unit). Grouped as `--help` groups them.
struct ServerFlags {
  // Network (gRPC): the KServe v2 port, its message and connection limits, keep-alive, the
  // listener watchdog, compressed requests and the transport's memory.
  std::string grpc_address = "0.0.0.0";
  int grpc_port = 8001;
  int64_t grpc_max_message_bytes = 2147483647;  // 2 GiB - 1, as Triton
  int grpc_max_concurrent_streams = 1024;
  int grpc_keepalive_time_ms = 60000;
  int grpc_keepalive_timeout_ms = 20000;
  int grpc_min_client_ping_interval_ms = 10000;
  int grpc_max_connections = 16384;
  int grpc_max_resets_per_second = 1000;
  int grpc_watchdog_interval_ms = 5000;
  int grpc_watchdog_timeout_ms = 2000;
  int grpc_watchdog_failures = 3;
  bool grpc_allow_compressed_requests = false;
  int64_t grpc_max_inflated_message_bytes = int64_t{64} << 20;
  int64_t grpc_memory_quota_bytes = int64_t{4} << 30;
  int64_t grpc_max_stream_pending_bytes = int64_t{64} << 20;
  int64_t grpc_max_connection_pending_bytes = int64_t{64} << 20;
  bool grpc_bdp_probe = false;
  int64_t grpc_max_pending_stream_bytes_total = int64_t{1} << 30;

  // TLS, for the gRPC and HTTP ports alike: PEM file paths (none: plaintext).
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;

  // Repository and model control: where the models are, which load at start-up, and how the
  // repository is read.
  std::string model_repository = SLUICE_DEFAULT_MODEL_REPOSITORY;
  // Whether --model-repository (or its environment variable) was given: without it the source
  // tree's models/ is served, and the log says so.
  bool model_repository_given = false;
  std::string model_control_mode = "none";
  // --model-control-mode=poll: seconds between two scans of the repository (Triton's default).
  int repository_poll_secs = 15;
  bool repository_poll_secs_given = false;  // set: a warning outside poll mode
  std::vector<std::string> load_models;
  bool strict_readiness = true;
  int64_t max_config_bytes = RepositoryOptions{}.max_config_bytes;
  bool allow_symlinks_out_of_repository = false;
  int model_control_queue_size = ServiceOptions{}.model_control_queue_size;

  // Batching, queues and limits: the per-model queue, the tokenizer stage, and what a model config
  // may ask for (issue 17 items 3, 8, 10: engine::LoadLimits).
  int64_t max_queue_size = 4096;
  int tokenizer_threads = 2;
  // The CPU compute pool's threads; 0: every CPU the process may use (engine::UsableCpus).
  int compute_threads = 0;
  int64_t tokenizer_queue_size = 1024;
  engine::LoadLimits load_limits;

  // Devices: where models run, and the batches in flight per instance there.
  std::string device = "auto";
  int executor_slots = 2;
  int gpu_executor_slots = 3;
  bool cpu_batcher_runs_batches = true;

  // HTTP/REST: the KServe v2 HTTP port (and the OpenAI route), its connections, timeouts and body
  // limits.
  bool allow_http = true;
  std::string http_address = "0.0.0.0";
  int http_port = 8000;
  int http_threads = 2;
  int http_max_connections = 1024;
  int http_idle_timeout_ms = 60000;
  int http_header_timeout_ms = 10000;
  int http_body_timeout_ms = 60000;
  int64_t http_max_body_bytes = int64_t{256} << 20;
  int64_t http_max_inflight_bytes = int64_t{1} << 30;
  int64_t http_max_json_bytes = int64_t{16} << 20;
  // The text routes' bounds (TEI, Cohere): http::TextApiLimits.
  int64_t text_max_client_batch_size = 32;
  int64_t text_max_rerank_documents = 1000;

  // Logging and metrics: the log's form and queue, access-log sampling, the Prometheus port and
  // the stats collector.
  std::string log_format = "text";
  std::string log_level = "info";
  int64_t log_queue_capacity = 8192;
  double access_log_sample_rate = 0;
  bool allow_metrics = true;
  std::string metrics_address = "0.0.0.0";
  int metrics_port = 8002;
  int64_t metrics_interval_ms = 1000;
  int metrics_http_threads = 8;
  int metrics_request_timeout_ms = 2000;

  // Shared memory (Triton's system / CUDA shared-memory extensions, issue 16):
  // shm::SharedMemoryRegistryOptions.
  int shared_memory_max_regions = shm::SharedMemoryRegistryOptions{}.max_regions;
  int64_t shared_memory_max_bytes =
      static_cast<int64_t>(shm::SharedMemoryRegistryOptions{}.max_mapped_bytes);

  // Shutdown: how long the SIGTERM/SIGINT drain may take.
  int exit_timeout_secs = 30;
};

// Adds every flag to `app`, each bound to its field of `flags` (which must outlive the parse),
// with its environment variable, default, check and help text, in its --help group.
void AddServerFlags(CLI::App& app, ServerFlags& flags);

}  // namespace sluice::server
