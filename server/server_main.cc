// sluice-server: the process. Flags, logger, engine, model repository, gRPC and HTTP servers, and
// the SIGTERM/SIGINT drain: readiness goes false, new requests get UNAVAILABLE, queued and
// in-flight requests are answered (up to --exit-timeout-secs), then the process exits 0.

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/log.h"
#include "common/pem_file.h"
#include "common/status_macros.h"
#include "engine/engine.h"
#include "engine/fault_injection.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "server/grpc_service.h"
#include "server/http/http_routes.h"
#include "server/http/http_server.h"
#include "server/infer_conversion.h"
#include "server/listener_watchdog.h"
#include "server/metrics_exporter.h"
#include "server/model_repository.h"
#include "server/nvml_gpu_source.h"
#include "server/process_wide_accept_guard.h"
#include "server/process_wide_reset_guard.h"
#include "server/shared_memory/shared_memory_registry.h"

#ifndef SLUICE_DEFAULT_MODEL_REPOSITORY
#define SLUICE_DEFAULT_MODEL_REPOSITORY "models"
#endif
#ifndef SLUICE_VERSION
#define SLUICE_VERSION "0.0.0"
#endif

namespace sluice::server {
namespace {

struct Flags {
  std::string model_repository = SLUICE_DEFAULT_MODEL_REPOSITORY;
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
  int64_t grpc_max_pending_stream_bytes_total = int64_t{1} << 30;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  std::string device = "auto";
  std::string model_control_mode = "none";
  std::vector<std::string> load_models;
  // What a model config may ask for (issue 17 items 3, 8, 10): engine::LoadLimits,
  // RepositoryOptions, ServiceOptions.
  engine::LoadLimits load_limits;
  int64_t max_config_bytes = RepositoryOptions{}.max_config_bytes;
  bool allow_symlinks_out_of_repository = false;
  int model_control_queue_size = ServiceOptions{}.model_control_queue_size;
  std::string log_format = "text";
  std::string log_level = "info";
  int64_t log_queue_capacity = 8192;
  int64_t max_queue_size = 4096;
  int executor_slots = 2;
  int gpu_executor_slots = 3;
  bool cpu_batcher_runs_batches = true;
  int tokenizer_threads = 2;
  int64_t tokenizer_queue_size = 1024;
  int exit_timeout_secs = 30;
  bool allow_metrics = true;
  std::string metrics_address = "0.0.0.0";
  int metrics_port = 8002;
  int64_t metrics_interval_ms = 1000;
  int metrics_http_threads = 8;
  int metrics_request_timeout_ms = 2000;
  double access_log_sample_rate = 0;
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
  // Shared-memory tensors (issue 16): shm::SharedMemoryRegistryOptions.
  int shared_memory_max_regions = shm::SharedMemoryRegistryOptions{}.max_regions;
  int64_t shared_memory_max_bytes =
      static_cast<int64_t>(shm::SharedMemoryRegistryOptions{}.max_mapped_bytes);
};

// Plaintext, TLS (--tls-cert/--tls-key) or mutual TLS (and --tls-ca).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const Flags& flags) {
  if (flags.tls_cert.empty() && flags.tls_key.empty()) {
    if (!flags.tls_ca.empty()) {
      return absl::InvalidArgumentError("--tls-ca needs --tls-cert and --tls-key");
    }
    return grpc::InsecureServerCredentials();
  }
  if (flags.tls_cert.empty() || flags.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together (give both)");
  }
  grpc::SslServerCredentialsOptions ssl(
      flags.tls_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                           : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain, common::ReadPemFile("--tls-cert", flags.tls_cert));
  ASSIGN_OR_RETURN(pair.private_key, common::ReadPemFile("--tls-key", flags.tls_key));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!flags.tls_ca.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs, common::ReadPemFile("--tls-ca", flags.tls_ca));
  }
  return grpc::SslServerCredentials(ssl);
}

void AddFlags(CLI::App& app, Flags& flags) {
  app.add_option("--model-repository", flags.model_repository,
                 "Model repository folder (<model>/config.pbtxt, <model>/<version>/)")
      ->envname("SLUICE_MODEL_REPOSITORY")
      ->capture_default_str();
  app.add_option("--grpc-address", flags.grpc_address, "Address the gRPC server binds")
      ->envname("SLUICE_GRPC_ADDRESS")
      ->capture_default_str();
  app.add_option("--grpc-port", flags.grpc_port,
                 "gRPC port (KServe v2); 0 picks a free port, which is logged")
      ->envname("SLUICE_GRPC_PORT")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--grpc-max-message-bytes,--max-request-bytes", flags.grpc_max_message_bytes,
                 "Largest gRPC message received or sent, and largest HTTP request body: a larger "
                 "request is refused (RESOURCE_EXHAUSTED; HTTP 413) before it is read into memory")
      ->envname("SLUICE_GRPC_MAX_MESSAGE_BYTES")
      ->check(CLI::Range(int64_t{1024}, int64_t{2147483647}))
      ->capture_default_str();
  app.add_option(
         "--tls-cert", flags.tls_cert,
         "PEM certificate (chain) of the gRPC and HTTP ports: with --tls-key, both are served "
         "over TLS only")
      ->envname("SLUICE_TLS_CERT");
  app.add_option("--tls-key", flags.tls_key, "PEM private key of --tls-cert")
      ->envname("SLUICE_TLS_KEY");
  app.add_option("--tls-ca", flags.tls_ca,
                 "PEM CA(s): clients must present a certificate they signed (mutual TLS); needs "
                 "--tls-cert")
      ->envname("SLUICE_TLS_CA");
  app.add_option("--grpc-max-concurrent-streams", flags.grpc_max_concurrent_streams,
                 "Most calls one client connection may have open at once (HTTP/2 "
                 "MAX_CONCURRENT_STREAMS); a client's further calls wait on its side")
      ->envname("SLUICE_GRPC_MAX_CONCURRENT_STREAMS")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--grpc-keepalive-time-ms", flags.grpc_keepalive_time_ms,
                 "The server pings a connection idle this long, so that calls of a client that "
                 "vanished without closing its connection are cancelled (and their queued "
                 "requests removed)")
      ->envname("SLUICE_GRPC_KEEPALIVE_TIME_MS")
      ->check(CLI::Range(1000, 86400000))
      ->capture_default_str();
  app.add_option("--grpc-keepalive-timeout-ms", flags.grpc_keepalive_timeout_ms,
                 "How long the server waits for a ping's answer before it closes the connection")
      ->envname("SLUICE_GRPC_KEEPALIVE_TIMEOUT_MS")
      ->check(CLI::Range(100, 3600000))
      ->capture_default_str();
  app.add_option("--grpc-min-client-ping-interval-ms", flags.grpc_min_client_ping_interval_ms,
                 "Clients may ping at most this often; a client that pings faster, repeatedly, is "
                 "disconnected (GOAWAY too_many_pings)")
      ->envname("SLUICE_GRPC_MIN_CLIENT_PING_INTERVAL_MS")
      ->check(CLI::Range(1000, 86400000))
      ->capture_default_str();
  app.add_option("--grpc-max-connections", flags.grpc_max_connections,
                 "Connections beyond this (counted as the process's open descriptors above those "
                 "it had at start, and never closer than 64 to the fd limit) are closed as soon "
                 "as they are accepted, so that a connection burst cannot exhaust descriptors; "
                 "0 turns the cap off (the fd-limit reserve still applies)")
      ->envname("SLUICE_GRPC_MAX_CONNECTIONS")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  app.add_option("--grpc-max-resets-per-second", flags.grpc_max_resets_per_second,
                 "A plaintext connection whose client resets more of its new streams before ending "
                 "them (HEADERS + RST_STREAM) than this in one second is closed: gRPC 1.51 has no "
                 "limit of its own (rapid reset, "
                 "CVE-2023-44487); 0 turns the check off. TLS connections are not inspected")
      ->envname("SLUICE_GRPC_MAX_RESETS_PER_SECOND")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  app.add_option("--grpc-watchdog-interval-ms", flags.grpc_watchdog_interval_ms,
                 "How often the server calls itself (ServerLive on a new loopback connection) to "
                 "check that the gRPC port still accepts; 0 turns the watchdog off")
      ->envname("SLUICE_GRPC_WATCHDOG_INTERVAL_MS")
      ->check(CLI::Range(0, 3600000))
      ->capture_default_str();
  app.add_option("--grpc-watchdog-timeout-ms", flags.grpc_watchdog_timeout_ms,
                 "Deadline of one watchdog call")
      ->envname("SLUICE_GRPC_WATCHDOG_TIMEOUT_MS")
      ->check(CLI::Range(10, 600000))
      ->capture_default_str();
  app.add_option("--grpc-watchdog-failures", flags.grpc_watchdog_failures,
                 "Consecutive unanswered watchdog calls after which liveness turns NOT_SERVING")
      ->envname("SLUICE_GRPC_WATCHDOG_FAILURES")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--grpc-allow-compressed-requests", flags.grpc_allow_compressed_requests,
                 "Accept gzip/deflate-compressed requests; off, they are refused (UNIMPLEMENTED) "
                 "before their message is inflated. On, every request's size limit becomes "
                 "min(--grpc-max-message-bytes, --grpc-max-inflated-message-bytes / 1032): gRPC "
                 "1.51 inflates a whole message before it checks the size, and deflate inflates "
                 "at most 1032-fold")
      ->envname("SLUICE_GRPC_ALLOW_COMPRESSED_REQUESTS")
      ->capture_default_str();
  app.add_option("--grpc-max-inflated-message-bytes", flags.grpc_max_inflated_message_bytes,
                 "With --grpc-allow-compressed-requests: the most memory one compressed request "
                 "may inflate to")
      ->envname("SLUICE_GRPC_MAX_INFLATED_MESSAGE_BYTES")
      ->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--grpc-memory-quota-bytes", flags.grpc_memory_quota_bytes,
                 "gRPC resource quota: the memory gRPC's transport may hold (read and write "
                 "buffers, call arenas) for all connections together; near it gRPC drops new "
                 "connections and cancels the streams holding the most")
      ->envname("SLUICE_GRPC_MEMORY_QUOTA_BYTES")
      ->check(CLI::Range(int64_t{16} << 20, int64_t{1} << 44))
      ->capture_default_str();
  app.add_option("--grpc-max-stream-pending-bytes", flags.grpc_max_stream_pending_bytes,
                 "Bytes one ModelStreamInfer stream may hold in requests being served and answers "
                 "not yet written before the server stops reading from it")
      ->envname("SLUICE_GRPC_MAX_STREAM_PENDING_BYTES")
      ->check(CLI::Range(int64_t{1} << 16, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--grpc-max-pending-stream-bytes-total", flags.grpc_max_pending_stream_bytes_total,
                 "The same over all streams together: past it, every stream that holds anything "
                 "stops reading until its answers are written")
      ->envname("SLUICE_GRPC_MAX_PENDING_STREAM_BYTES_TOTAL")
      ->check(CLI::Range(int64_t{1} << 16, int64_t{1} << 44))
      ->capture_default_str();
  app.add_option("--device", flags.device,
                 "Where models run: auto (a GPU if one is usable, else the CPU), cpu, or cuda:N")
      ->envname("SLUICE_DEVICE")
      ->capture_default_str();
  app.add_option("--model-control-mode", flags.model_control_mode,
                 "none: load every model at start-up; explicit: load only --load-model ones and "
                 "allow the RepositoryModelLoad/Unload RPCs")
      ->envname("SLUICE_MODEL_CONTROL_MODE")
      ->check(CLI::IsMember({"none", "explicit"}))
      ->capture_default_str();
  app.add_option("--load-model", flags.load_models,
                 "With --model-control-mode=explicit: a model to load at start-up (repeatable)")
      ->envname("SLUICE_LOAD_MODEL");
  app.add_option("--max-model-batch-size", flags.load_limits.max_batch_size,
                 "Largest max_batch_size a model config may declare; a larger one is that "
                 "model's load error")
      ->envname("SLUICE_MAX_MODEL_BATCH_SIZE")
      ->check(CLI::Range(1, 2147483647))
      ->capture_default_str();
  app.add_option("--max-tensor-bytes", flags.load_limits.max_tensor_bytes,
                 "Largest input or output a model config may declare, in bytes at its "
                 "max_batch_size (fixed dims)")
      ->envname("SLUICE_MAX_TENSOR_BYTES")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 50))
      ->capture_default_str();
  app.add_option("--max-batch-bytes", flags.load_limits.max_batch_bytes,
                 "Largest batch a model config may declare: every input and output at its "
                 "max_batch_size, in bytes")
      ->envname("SLUICE_MAX_BATCH_BYTES")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 50))
      ->capture_default_str();
  app.add_option("--max-model-instances", flags.load_limits.max_instances,
                 "Most instances (instance_group count) one model version may have")
      ->envname("SLUICE_MAX_MODEL_INSTANCES")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--max-model-threads", flags.load_limits.max_threads,
                 "Most threads one model version's load may start (2 per instance and its "
                 "batcher)")
      ->envname("SLUICE_MAX_MODEL_THREADS")
      ->check(CLI::Range(3, 1 << 17))
      ->capture_default_str();
  app.add_option("--max-model-load-bytes", flags.load_limits.max_load_bytes,
                 "Most memory one model version's load may allocate up front (warm-up batches, "
                 "backend scratch, weights), in bytes")
      ->envname("SLUICE_MAX_MODEL_LOAD_BYTES")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 50))
      ->capture_default_str();
  app.add_option("--max-config-bytes", flags.max_config_bytes,
                 "Largest config.pbtxt read; a larger one, or one that is not a regular file, is "
                 "that model's load error")
      ->envname("SLUICE_MAX_CONFIG_BYTES")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--allow-symlinks-out-of-repository", flags.allow_symlinks_out_of_repository,
                 "Follow a model folder, config.pbtxt, version folder or version file that is a "
                 "symlink leading outside the model repository (refused by default)")
      ->envname("SLUICE_ALLOW_SYMLINKS_OUT_OF_REPOSITORY")
      ->capture_default_str();
  app.add_option("--model-control-queue-size", flags.model_control_queue_size,
                 "Load/unload calls that may wait behind the running one; beyond it they get "
                 "RESOURCE_EXHAUSTED at once")
      ->envname("SLUICE_MODEL_CONTROL_QUEUE_SIZE")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--log-format", flags.log_format, "Log lines as text or json")
      ->envname("SLUICE_LOG_FORMAT")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--log-level", flags.log_level, "debug, info, warning or error")
      ->envname("SLUICE_LOG_LEVEL")
      ->check(CLI::IsMember({"debug", "info", "warning", "error"}))
      ->capture_default_str();
  app.add_option("--log-queue-capacity", flags.log_queue_capacity,
                 "Log records waiting for the writer thread; beyond it records are dropped and "
                 "counted, never waited for")
      ->envname("SLUICE_LOG_QUEUE_CAPACITY")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  app.add_option("--max-queue-size", flags.max_queue_size,
                 "Requests that may wait per model when its config sets no max_queue_size; "
                 "beyond it requests get RESOURCE_EXHAUSTED at once")
      ->envname("SLUICE_MAX_QUEUE_SIZE")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  app.add_option("--executor-slots", flags.executor_slots,
                 "Batches in flight per model instance on the CPU backend (staging buffers each)")
      ->envname("SLUICE_EXECUTOR_SLOTS")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app.add_option("--cpu-batcher-runs-batches", flags.cpu_batcher_runs_batches,
                 "A model with one CPU instance computes and answers its batches on its batcher "
                 "thread (no hand-off between the queue and the answers; one batch at a time); "
                 "false: on the executor's own issue and completion threads (--executor-slots "
                 "batches in flight), as models with several instances always do")
      ->envname("SLUICE_CPU_BATCHER_RUNS_BATCHES")
      ->capture_default_str();
  app.add_option("--gpu-executor-slots", flags.gpu_executor_slots,
                 "Batches in flight per model instance on a GPU, each with its own pinned and "
                 "device buffers and CUDA graphs: 3 lets one batch copy in while one computes and "
                 "one copies out")
      ->envname("SLUICE_GPU_EXECUTOR_SLOTS")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app.add_option("--tokenizer-threads", flags.tokenizer_threads,
                 "Threads that tokenize text inputs (encoder models with a tokenizer) before "
                 "batching, off the gRPC/HTTP threads; shared by all models")
      ->envname("SLUICE_TOKENIZER_THREADS")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--tokenizer-queue-size", flags.tokenizer_queue_size,
                 "Text requests that may wait for a tokenizer thread; beyond it requests get "
                 "RESOURCE_EXHAUSTED at once")
      ->envname("SLUICE_TOKENIZER_QUEUE_SIZE")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--allow-metrics", flags.allow_metrics,
                 "Serve Prometheus metrics (and run the stats collector); false turns both off")
      ->envname("SLUICE_ALLOW_METRICS")
      ->capture_default_str();
  app.add_option("--metrics-address", flags.metrics_address,
                 "Address the metrics HTTP server binds")
      ->envname("SLUICE_METRICS_ADDRESS")
      ->capture_default_str();
  app.add_option("--metrics-port", flags.metrics_port,
                 "Prometheus metrics port (path /metrics); 0 picks a free port, which is logged")
      ->envname("SLUICE_METRICS_PORT")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--metrics-interval-ms", flags.metrics_interval_ms,
                 "How often the stats collector reads the executors' (device) counters and "
                 "updates sluice_device_items_total and sluice_throughput_items_per_second; "
                 "0 turns the collector off")
      ->envname("SLUICE_METRICS_INTERVAL_MS")
      ->check(CLI::Range(int64_t{0}, int64_t{3600000}))
      ->capture_default_str();
  app.add_option("--metrics-http-threads", flags.metrics_http_threads,
                 "Worker threads of the metrics HTTP server; each serves one connection at a "
                 "time, so this many slow clients at once can delay a scrape")
      ->envname("SLUICE_METRICS_HTTP_THREADS")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--metrics-request-timeout-ms", flags.metrics_request_timeout_ms,
                 "The metrics HTTP server drops a connection that has not sent its request "
                 "(headers included) within this time, or keeps it idle this long")
      ->envname("SLUICE_METRICS_REQUEST_TIMEOUT_MS")
      ->check(CLI::Range(100, 600000))
      ->capture_default_str();
  app.add_option("--access-log-sample-rate", flags.access_log_sample_rate,
                 "Fraction of requests (0..1) that get an access-log record at info level (model, "
                 "version, id, batch, queue and compute time, status)")
      ->envname("SLUICE_ACCESS_LOG_SAMPLE_RATE")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--allow-http", flags.allow_http,
                 "Serve the KServe v2 HTTP/REST protocol (--http-port); false turns it off")
      ->envname("SLUICE_ALLOW_HTTP")
      ->capture_default_str();
  app.add_option("--http-address", flags.http_address, "IP address the HTTP server binds")
      ->envname("SLUICE_HTTP_ADDRESS")
      ->capture_default_str();
  app.add_option("--http-port", flags.http_port,
                 "HTTP/REST port (KServe v2); 0 picks a free port, which is logged. TLS with "
                 "the same --tls-* flags as gRPC; bodies are limited by --max-request-bytes")
      ->envname("SLUICE_HTTP_PORT")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--http-threads", flags.http_threads,
                 "HTTP I/O threads; each serves many connections (none is held per connection)")
      ->envname("SLUICE_HTTP_THREADS")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--http-max-connections", flags.http_max_connections,
                 "HTTP connections open at once; one more is answered 503 and closed")
      ->envname("SLUICE_HTTP_MAX_CONNECTIONS")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--http-idle-timeout-ms", flags.http_idle_timeout_ms,
                 "A keep-alive HTTP connection idle this long between requests is closed")
      ->envname("SLUICE_HTTP_IDLE_TIMEOUT_MS")
      ->check(CLI::Range(100, 3600000))
      ->capture_default_str();
  app.add_option("--http-header-timeout-ms", flags.http_header_timeout_ms,
                 "From a request's first byte to the end of its header, and on a new connection "
                 "from the connect to its first byte (a client that trickles, or connects and "
                 "says nothing, is cut off)")
      ->envname("SLUICE_HTTP_HEADER_TIMEOUT_MS")
      ->check(CLI::Range(100, 3600000))
      ->capture_default_str();
  app.add_option("--http-body-timeout-ms", flags.http_body_timeout_ms,
                 "From the end of a request's header to the end of its body")
      ->envname("SLUICE_HTTP_BODY_TIMEOUT_MS")
      ->check(CLI::Range(100, 3600000))
      ->capture_default_str();
  app.add_option("--http-max-body-bytes", flags.http_max_body_bytes,
                 "Largest HTTP request body (the lower of this and --max-request-bytes applies): "
                 "a larger one is answered 413 from its Content-Length, before it is read")
      ->envname("SLUICE_HTTP_MAX_BODY_BYTES")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--http-max-inflight-bytes", flags.http_max_inflight_bytes,
                 "HTTP request bodies held at once, all connections together (being read, queued, "
                 "running, being answered); a request that does not fit is answered 503 with "
                 "Retry-After before its body is read. At least the largest body")
      ->envname("SLUICE_HTTP_MAX_INFLIGHT_BYTES")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 42))
      ->capture_default_str();
  app.add_option("--http-max-json-bytes", flags.http_max_json_bytes,
                 "Largest JSON part of an HTTP infer request (it is parsed on an I/O thread); a "
                 "larger one is answered 413. Large tensors go in the binary tensor extension")
      ->envname("SLUICE_HTTP_MAX_JSON_BYTES")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 32))
      ->capture_default_str();
  // Shared-memory tensors (Triton's system / CUDA shared-memory extensions, issue 16).
  app.add_option("--shared-memory-max-regions", flags.shared_memory_max_regions,
                 "Shared-memory regions (system and CUDA together) clients may have registered "
                 "at once; 0 turns the shared-memory extensions off")
      ->envname("SLUICE_SHARED_MEMORY_MAX_REGIONS")
      ->check(CLI::Range(0, 65536))
      ->capture_default_str();
  app.add_option("--shared-memory-max-bytes", flags.shared_memory_max_bytes,
                 "Bytes of client shared memory mapped at once (registered regions, those "
                 "unregistered but still used by a request, and output regions' writable "
                 "mappings); a registration past it is refused")
      ->envname("SLUICE_SHARED_MEMORY_MAX_BYTES")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 50))
      ->capture_default_str();
  app.add_option("--exit-timeout-secs,--exit-timeout", flags.exit_timeout_secs,
                 "On SIGTERM/SIGINT, how long queued and in-flight requests may take to finish")
      ->envname("SLUICE_EXIT_TIMEOUT_SECS")
      ->check(CLI::Range(0, 3600))
      ->capture_default_str();
}

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

// Descriptors open now (lowest-first numbering: the first free number).
int OpenDescriptorCount() {
  const int probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (probe < 0) return 0;
  close(probe);
  return probe;
}

// Exit code after a process-fatal device fault (engine/device_fault.h): the drain completed, and
// the process must be restarted. (1: a run-time failure; 2: a bad flag or config.)
constexpr int kExitProcessFatal = 3;

// How long gRPC may take, once the engine is idle, to flush answers before calls are cancelled.
constexpr auto kShutdownGrace = std::chrono::milliseconds(1000);

int Run(const Flags& flags) {
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
  // Block the shutdown signals in every thread; main waits for them with sigwait() below.
  // SIGUSR1 is the engine's process-fatal device fault waking main (on_process_fatal below).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  common::LoggerOptions log_options;
  log_options.min_level = *common::ParseLogLevel(flags.log_level);
  log_options.format = *common::ParseLogFormat(flags.log_format);
  log_options.queue_capacity = static_cast<size_t>(flags.log_queue_capacity);
  common::Logger logger(log_options);
  common::Logger* log = &logger;
  // main serves no request, so its own lines (ports, "server ready", shutdown) wait for room in
  // the log queue rather than being dropped: LOG_INFO_WAITING. Scripts and tests rely on them.

  LOG_INFO_WAITING(log, "sluice-server ", SLUICE_VERSION,
                   " starting (memory allocator: ", SLUICE_MALLOC_NAME, ")");
  const rlim_t fd_limit = RaiseFdLimit(log);
  absl::StatusOr<engine::DeviceSelection> device = engine::SelectDevice(flags.device);
  if (!device.ok()) {
    LOG_ERROR(log, device.status().message(), " (use --device=auto or --device=cpu)");
    return 2;
  }
  LOG_INFO_WAITING(log, device->description);

  engine::EngineOptions engine_options;
  engine_options.logger = log;
  engine_options.device = *device;
  engine_options.default_max_queue_size = flags.max_queue_size;
  engine_options.executor_slots = flags.executor_slots;
  engine_options.gpu_executor_slots = flags.gpu_executor_slots;
  engine_options.cpu_single_instance_on_batcher = flags.cpu_batcher_runs_batches;
  engine_options.preparation_threads = flags.tokenizer_threads;
  engine_options.preparation_queue_size = flags.tokenizer_queue_size;
  // The collector's readings are only published as metrics, so it runs only with them.
  engine_options.stats_interval =
      std::chrono::milliseconds(flags.allow_metrics ? flags.metrics_interval_ms : 0);
  engine_options.access_log_sample_rate = flags.access_log_sample_rate;
  // A sticky device error (engine/device_fault.h): the engine has failed every model and stopped
  // taking requests; main, woken by SIGUSR1, turns liveness and readiness false, drains and exits
  // with kExitProcessFatal so that the orchestrator restarts the process.
  std::atomic<bool> process_fatal{false};
  engine_options.on_process_fatal = [&process_fatal](const absl::Status&) {
    process_fatal.store(true);
    kill(getpid(), SIGUSR1);  // blocked in every thread: main's sigwait() takes it
  };
  // Test-only (engine/fault_injection.h): armed by the environment alone, and said loudly.
  if (const char* inject = std::getenv(engine::kFaultInjectionEnvVar);
      inject != nullptr && *inject != '\0') {
    absl::StatusOr<engine::FaultInjectionSpec> spec =
        engine::ParseFaultInjectionSpecForTest(inject);
    if (!spec.ok()) {
      LOG_ERROR(log, spec.status().message());
      return 2;
    }
    LOG_WARNING(log, "TEST-ONLY FAULT INJECTION ARMED (", engine::kFaultInjectionEnvVar, "=",
                inject, "): model '", spec->model, "' will fault after ", spec->after_batches,
                " batches; never set this in production");
    engine_options.before_batch_for_test = engine::MakeFaultInjectionHookForTest(*spec);
  }
  absl::StatusOr<std::unique_ptr<engine::Engine>> engine = engine::Engine::Create(engine_options);
  if (!engine.ok()) {
    LOG_ERROR(log, "engine: ", engine.status().message());
    return 1;
  }

  // Shared-memory regions, for gRPC and HTTP alike; before the exporter, which reads its stats.
  // CUDA regions need the server to run on a GPU (IPC handles open on a device).
  shm::SharedMemoryRegistryOptions shm_options;
  shm_options.max_regions = flags.shared_memory_max_regions;
  shm_options.max_mapped_bytes = static_cast<uint64_t>(flags.shared_memory_max_bytes);
  if (device->kind == engine::DeviceSelection::Kind::kCuda) {
    shm_options.open_cuda_ipc = engine::OpenCudaIpcMemory;
  } else {
    shm_options.cuda_unavailable_reason =
        absl::StrCat("this server runs its models on the CPU (", device->description,
                     "); CUDA IPC handles can only be opened on a GPU");
  }
  shm::SharedMemoryRegistry shared_memory(std::move(shm_options));

  // Open inference calls: the service (gRPC) and the routes (HTTP) count them, the exporter reads
  // them.
  std::atomic<int64_t> active_infer_calls{0};
  std::atomic<int64_t> active_http_infer_requests{0};
  // Metrics before gRPC and before the models load: a scrape during a long load sees the process.
  std::unique_ptr<NvmlGpuSource> gpu_source;  // outlives the exporter, which borrows it
  std::unique_ptr<MetricsExporter> metrics;
  if (flags.allow_metrics) {
    MetricsExporterOptions metrics_options;
    metrics_options.address = flags.metrics_address;
    metrics_options.port = flags.metrics_port;
    metrics_options.http_threads = static_cast<size_t>(flags.metrics_http_threads);
    metrics_options.request_timeout_ms = flags.metrics_request_timeout_ms;
    // GPU memory and utilization (sluice_gpu_*) where the NVIDIA driver's NVML is present.
    if (absl::StatusOr<std::unique_ptr<NvmlGpuSource>> nvml = NvmlGpuSource::Open(); nvml.ok()) {
      gpu_source = *std::move(nvml);
      LOG_INFO_WAITING(log, "GPU metrics from NVML (", gpu_source->device_count(), " GPUs)");
    } else {
      LOG_INFO_WAITING(log, "no GPU metrics: ", nvml.status().message());
    }
    metrics_options.gpu_source = gpu_source.get();
    metrics_options.active_infer_calls = &active_infer_calls;
    if (flags.allow_http) metrics_options.active_http_infer_requests = &active_http_infer_requests;
    metrics_options.shared_memory = [&shared_memory] {
      const shm::SharedMemoryStats stats = shared_memory.Stats();
      return SharedMemorySample{.system_regions = stats.system_regions,
                                .cuda_regions = stats.cuda_regions,
                                .mapped_bytes = stats.mapped_bytes,
                                .draining_regions = stats.draining_regions};
    };
    absl::StatusOr<std::unique_ptr<MetricsExporter>> exporter =
        MetricsExporter::Start(**engine, log, metrics_options);
    if (!exporter.ok()) {
      LOG_ERROR(log, exporter.status().message(),
                "; choose another --metrics-port, or --allow-metrics=false");
      return 1;
    }
    metrics = *std::move(exporter);
    // Tests and scripts read this line to find a port picked with --metrics-port=0.
    LOG_INFO_WAITING(log, "metrics listening on ", flags.metrics_address, ":", metrics->port(),
                     "/metrics metrics_port=", metrics->port(), " collector interval ",
                     flags.metrics_interval_ms, " ms");
  } else {
    LOG_INFO_WAITING(log, "metrics disabled (--allow-metrics=false)");
  }
  RepositoryOptions repository_options;
  repository_options.load_limits = flags.load_limits;
  repository_options.max_config_bytes = flags.max_config_bytes;
  repository_options.allow_symlinks_out_of_repository = flags.allow_symlinks_out_of_repository;
  absl::StatusOr<std::unique_ptr<ModelRepository>> repository = ModelRepository::Create(
      flags.model_repository, engine->get(), log, std::move(repository_options));
  if (!repository.ok()) {
    LOG_ERROR(log, repository.status().message());
    return 1;
  }

  const bool explicit_mode = flags.model_control_mode == "explicit";
  if (!explicit_mode && !flags.load_models.empty()) {
    LOG_ERROR(log, "--load-model needs --model-control-mode=explicit");
    return 2;
  }

  ServiceOptions service_options;
  service_options.explicit_model_control = explicit_mode;
  service_options.server_version = SLUICE_VERSION;
  service_options.active_infer_calls = &active_infer_calls;
  service_options.model_control_queue_size = flags.model_control_queue_size;
  service_options.max_stream_pending_bytes = flags.grpc_max_stream_pending_bytes;
  service_options.max_pending_stream_bytes_total = flags.grpc_max_pending_stream_bytes_total;
  service_options.shared_memory = &shared_memory;
  InferenceService service(engine->get(), repository->get(), service_options);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int bound_port = 0;
  const std::string address = absl::StrCat(flags.grpc_address, ":", flags.grpc_port);
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = ServerCredentials(flags);
  if (!credentials.ok()) {
    LOG_ERROR(log, credentials.status().message());
    return 2;
  }
  builder.AddListeningPort(address, *credentials, &bound_port);
  // Compressed requests: gRPC 1.51 inflates a whole message before it applies the size limit
  // (a 1 MiB gzip message inflated to 1.7 GB), so by default only uncompressed ones are accepted:
  // with gzip and deflate disabled, a call that names either is refused UNIMPLEMENTED when its
  // headers arrive, before its message is read. Identity cannot be disabled.
  int64_t max_receive_bytes = flags.grpc_max_message_bytes;
  if (flags.grpc_allow_compressed_requests) {
    // Deflate's largest ratio is 1032:1, so this bounds what any accepted message inflates to.
    max_receive_bytes = std::min(max_receive_bytes, flags.grpc_max_inflated_message_bytes / 1032);
    LOG_INFO_WAITING(log, "compressed requests allowed: requests limited to ", max_receive_bytes,
                     " bytes (--grpc-max-inflated-message-bytes=",
                     flags.grpc_max_inflated_message_bytes, " / 1032)");
  } else {
    builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_DEFLATE, false);
    builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_GZIP, false);
  }
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_receive_bytes));
  // Everything gRPC's transport holds (read/write buffers, call arenas) counts against one quota:
  // near it gRPC refuses new connections and cancels the streams holding the most, instead of
  // growing until the kernel kills the process (slow readers, rapid reset floods).
  grpc::ResourceQuota quota("sluice-grpc");
  quota.Resize(static_cast<size_t>(flags.grpc_memory_quota_bytes));
  builder.SetResourceQuota(quota);
  builder.SetMaxSendMessageSize(static_cast<int>(flags.grpc_max_message_bytes));
  // Connection policy, set explicitly rather than left to gRPC's defaults (unlimited streams per
  // connection; no server pings): a bound on what one connection can hold open, dead peers
  // detected, and clients that ping abusively disconnected.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, flags.grpc_max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, flags.grpc_keepalive_time_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, flags.grpc_keepalive_timeout_ms);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             flags.grpc_min_client_ping_interval_ms);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  builder.RegisterService(&service);
  // The connection cap (process_wide_accept_guard.h): a descriptor ceiling below the fd limit,
  // and accept errors that no longer stop gRPC's listener.
  AcceptGuardOptions guard;
  {
    const int64_t reserve_ceiling = static_cast<int64_t>(fd_limit) - 64;
    const int64_t cap_ceiling = flags.grpc_max_connections > 0
                                    ? int64_t{OpenDescriptorCount()} + flags.grpc_max_connections
                                    : reserve_ceiling;
    guard.fd_ceiling = static_cast<int>(
        std::clamp<int64_t>(std::min(reserve_ceiling, cap_ceiling), 16, int64_t{1} << 30));
  }
  if (const char* value = std::getenv("SLUICE_TEST_BREAK_GRPC_LISTENER_AFTER");
      value != nullptr && *value != '\0') {
    guard.break_listener_after_accepts_for_test = std::atoll(value);
    LOG_WARNING(log, "TEST-ONLY: the gRPC listener will be broken after ",
                guard.break_listener_after_accepts_for_test,
                " connections (SLUICE_TEST_BREAK_GRPC_LISTENER_AFTER); never set this in "
                "production");
  }
  ResetGuardOptions reset_guard;
  reset_guard.max_resets_per_second = flags.grpc_max_resets_per_second;
  ConfigureResetGuard(reset_guard);
  ConfigureAcceptGuard(guard);
  LOG_INFO_WAITING(log, "gRPC connections: refused past ", guard.fd_ceiling,
                   " open descriptors (--grpc-max-connections=", flags.grpc_max_connections,
                   ", fd limit ", fd_limit, ")");
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    LOG_ERROR(log, "cannot listen on ", address, " (port in use, or a bad address?)");
    return 1;
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  // Readiness: the overall service ("") turns SERVING once the models have loaded and back to
  // NOT_SERVING while draining. Liveness: "liveness" is SERVING for as long as RPCs are served at
  // all, so a Kubernetes liveness probe never restarts a pod that is loading or draining.
  health->SetServingStatus(false);
  health->SetServingStatus("liveness", true);
  // Tests and scripts read this line to find a port picked with --grpc-port=0.
  const char* transport = flags.tls_cert.empty() ? "plaintext"
                          : flags.tls_ca.empty() ? "TLS"
                                                 : "mutual TLS";
  LOG_INFO_WAITING(log, "gRPC listening on ", flags.grpc_address, ":", bound_port, " (", transport,
                   ") grpc_port=", bound_port);
  // The watchdog calls the port over loopback whatever address it is bound to (a wildcard or a
  // loopback address; a specific other address is called as given).
  std::unique_ptr<ListenerWatchdog> watchdog;
  // The HTTP/REST routes (the server starts below), over the same engine and repository; same TLS
  // flags as gRPC.
  http::HttpRoutesOptions routes_options;
  routes_options.explicit_model_control = explicit_mode;
  routes_options.model_control = service.model_control();
  routes_options.server_version = SLUICE_VERSION;
  routes_options.max_json_bytes = static_cast<size_t>(flags.http_max_json_bytes);
  routes_options.active_infer_requests = &active_http_infer_requests;
  routes_options.shared_memory = &shared_memory;
  http::HttpRoutes routes(engine->get(), repository->get(), routes_options);

  if (flags.grpc_watchdog_interval_ms > 0) {
    ListenerWatchdogOptions watchdog_options;
    std::string host = flags.grpc_address;
    if (host == "0.0.0.0" || host.empty()) host = "127.0.0.1";
    if (host == "::" || host == "[::]") host = "[::1]";
    if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
    watchdog_options.target = absl::StrCat(host, ":", bound_port);
    watchdog_options.interval = std::chrono::milliseconds(flags.grpc_watchdog_interval_ms);
    watchdog_options.probe_timeout = std::chrono::milliseconds(flags.grpc_watchdog_timeout_ms);
    watchdog_options.failures_to_trip = flags.grpc_watchdog_failures;
    watchdog_options.logger = log;
    // Liveness on every protocol follows the gRPC listener: an orchestrator probing HTTP restarts
    // a process whose gRPC port died just as one probing gRPC does.
    watchdog_options.on_change = [health, &service, &routes, &process_fatal](bool accepting) {
      const bool live = accepting && !process_fatal.load();  // a dead device stays dead
      service.SetLive(live);
      routes.SetLive(live);
      health->SetServingStatus("liveness", live);
    };
    watchdog = ListenerWatchdog::Start(std::move(watchdog_options));
  }

  // The HTTP/REST front end's server, over the routes above; same TLS flags as gRPC.
  std::unique_ptr<http::HttpServer> http_server;
  if (flags.allow_http) {
    http::HttpServerOptions http_options;
    http_options.address = flags.http_address;
    http_options.port = flags.http_port;
    http_options.threads = flags.http_threads;
    http_options.max_connections = flags.http_max_connections;
    // --max-request-bytes bounds every protocol; --http-max-body-bytes (default 256 MiB) keeps
    // HTTP's own bound sane when that one is left at gRPC's 2 GiB.
    const bool http_bound = flags.http_max_body_bytes <= flags.grpc_max_message_bytes;
    http_options.max_body_bytes = static_cast<uint64_t>(http_bound ? flags.http_max_body_bytes
                                                                   : flags.grpc_max_message_bytes);
    http_options.max_body_bytes_flag = http_bound ? "--http-max-body-bytes" : "--max-request-bytes";
    http_options.max_inflight_body_bytes = static_cast<uint64_t>(flags.http_max_inflight_bytes);
    http_options.idle_timeout_ms = flags.http_idle_timeout_ms;
    http_options.header_timeout_ms = flags.http_header_timeout_ms;
    http_options.body_timeout_ms = flags.http_body_timeout_ms;
    if (!flags.tls_cert.empty()) {
      // ServerCredentials() above already checked that the files go together and read them.
      http_options.tls_cert_pem = *common::ReadPemFile("--tls-cert", flags.tls_cert);
      http_options.tls_key_pem = *common::ReadPemFile("--tls-key", flags.tls_key);
      if (!flags.tls_ca.empty()) {
        http_options.tls_ca_pem = *common::ReadPemFile("--tls-ca", flags.tls_ca);
      }
    }
    absl::StatusOr<std::unique_ptr<http::HttpServer>> started = http::HttpServer::Start(
        std::move(http_options), [&routes](http::HttpRequest&& request, http::Responder respond) {
          routes.Handle(std::move(request), std::move(respond));
        });
    if (!started.ok()) {
      LOG_ERROR(log, started.status().message(),
                "; choose another --http-port, or --allow-http=false");
      server->Shutdown();
      return 1;
    }
    http_server = *std::move(started);
    // Tests and scripts read this line to find a port picked with --http-port=0.
    LOG_INFO_WAITING(log, "HTTP listening on ", flags.http_address, ":", http_server->port(), " (",
                     transport, ", ", flags.http_threads,
                     " I/O threads) http_port=", http_server->port());
  } else {
    LOG_INFO_WAITING(log, "HTTP disabled (--allow-http=false)");
  }

  // Models load after the ports are open: liveness answers during a long load, readiness waits.
  int failed = 0;
  if (explicit_mode) {
    for (const std::string& name : flags.load_models) {
      failed += (*repository)->Load(name).ok() ? 0 : 1;
    }
  } else {
    failed = (*repository)->LoadAll();
  }
  if (failed > 0) {
    LOG_WARNING(log, failed, " model(s) failed to load; see RepositoryIndex for the reasons");
  }
  // A process-fatal device fault during the loads (its SIGUSR1 waits for the sigwait below)
  // leaves readiness false.
  const bool ready = !process_fatal.load();
  service.SetReady(ready);
  routes.SetReady(ready);
  health->SetServingStatus(ready);
  LOG_INFO_WAITING(log, "server ready: repository ", (*repository)->root(), ", model control ",
                   flags.model_control_mode);

  int signal_number = 0;
  for (;;) {
    sigwait(&signals, &signal_number);
    if (signal_number != SIGUSR1 || process_fatal.load()) break;
    LOG_WARNING(log, "received SIGUSR1 with no device fault: ignored");
  }
  const bool fatal = process_fatal.load();
  if (fatal) {
    // Liveness first: the process cannot recover, so the orchestrator must restart it, and a
    // probe during the drain already says so.
    service.SetLive(false);
    routes.SetLive(false);
    health->SetServingStatus("liveness", false);
    LOG_ERROR(log,
              "process-fatal device fault (logged above): liveness and readiness are "
              "NOT_SERVING; draining (exit timeout ",
              flags.exit_timeout_secs, " s), then exiting with code ", kExitProcessFatal,
              " so that the process is restarted");
  } else {
    LOG_INFO_WAITING(log, "received ", signal_number == SIGTERM ? "SIGTERM" : "SIGINT",
                     ": draining (exit timeout ", flags.exit_timeout_secs, " s)");
  }
  service.SetReady(false);
  routes.SetReady(false);
  health->SetServingStatus(false);
  // HTTP answers from now on say Connection: close, and idle keep-alive connections are closed.
  if (http_server != nullptr) http_server->BeginDrain();
  if (watchdog != nullptr) watchdog->Stop();  // the drain closes the port; not a dead listener
  (*engine)->BeginDrain();
  const auto exit_deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(flags.exit_timeout_secs);
  const bool idle = (*engine)->WaitIdle(std::chrono::seconds(flags.exit_timeout_secs));
  if (!idle) {
    LOG_WARNING(log, "exit timeout reached with requests still running; they are cancelled");
  }
  // Queued load/unload calls are answered UNAVAILABLE; a running one may finish until the exit
  // timeout. If it is still running then (a read blocked in a hung mount cannot be interrupted),
  // its caller has been answered and the process ends below with _exit() instead of joining the
  // thread (ModelControl::Stop says why; no thread is detached).
  const bool control_stopped = service.StopModelControl(exit_deadline);
  if (!control_stopped) {
    LOG_WARNING(log,
                "exit timeout reached with a model load/unload still running on the control "
                "thread; exiting without waiting for it");
  }
  // Every accepted request has been answered (Finish() called); give gRPC a moment to flush the
  // last answers and let streams end, then cancel what remains. (gRPC's Shutdown waits for the
  // whole grace period while any client keeps a connection open, so it is kept short.)
  server->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  // One line per model version with its final counts, for operators and for the drain tests.
  if (auto stats = (*engine)->GetStats("", -1); stats.ok()) {
    for (const auto& entry : *stats) {
      LOG_INFO_WAITING(log, "final stats model=", entry.name, " version=", entry.version,
                       " success=", entry.stats.success.count, " failure=", entry.stats.fail.count);
      if (entry.stats.prepares) {  // its tokenizer, named as in ModelStatistics
        LOG_INFO_WAITING(log, "final stats model=", entry.name, kTokenizerStatsSuffix,
                         " version=", entry.version,
                         " success=", entry.stats.preparation.success.count,
                         " failure=", entry.stats.preparation.fail.count);
      }
    }
  }
  // Answers whatever the exit timeout cut short, so every reactor finishes and Wait() returns.
  (*engine)->Shutdown();
  server->Wait();
  // Every HTTP request has been answered too (the engine is shut down), but answers may still be
  // waiting to be written or being written: they get what is left of the exit timeout (at least
  // the gRPC grace) before the I/O threads stop.
  if (http_server != nullptr) {
    http_server->Stop(
        std::max(kShutdownGrace, std::chrono::duration_cast<std::chrono::milliseconds>(
                                     exit_deadline - std::chrono::steady_clock::now())));
  }
  if (!control_stopped) {
    // Every call is answered and flushed, the stats are logged; what is left is a thread stuck in
    // a system call, which no destructor may run under. Flush the log and end here.
    metrics.reset();
    LOG_INFO_WAITING(log, "sluice-server stopped (control thread abandoned at the exit timeout)");
    logger.Flush();
    std::fflush(nullptr);
    _exit(fatal ? kExitProcessFatal : 0);
  }
  metrics.reset();  // Prometheus could watch the drain; now its HTTP server stops
  LOG_INFO_WAITING(log, "sluice-server stopped",
                   fatal ? " after a process-fatal device fault" : "");
  // The logger's destructor writes every queued record before the process exits.
  return fatal ? kExitProcessFatal : 0;
}

}  // namespace
}  // namespace sluice::server

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
  sluice::server::Flags flags;
  sluice::server::AddFlags(app, flags);
  CLI11_PARSE(app, argc, argv);
  return sluice::server::Run(flags);
}
