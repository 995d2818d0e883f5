#include "server/main/server_flags.h"

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"

namespace sluice::server {
namespace {

// The --help groups, in the order --help lists them (CLI11 lists a group where its first option
// was added).
constexpr const char* kNetworkGroup = "Network (gRPC)";
constexpr const char* kTlsGroup = "TLS";
constexpr const char* kRepositoryGroup = "Repository and model control";
constexpr const char* kBatchingGroup = "Batching, queues and limits";
constexpr const char* kDeviceGroup = "Devices";
constexpr const char* kHttpGroup = "HTTP/REST";
constexpr const char* kLoggingGroup = "Logging and metrics";
constexpr const char* kSharedMemoryGroup = "Shared memory";
constexpr const char* kShutdownGroup = "Shutdown";

// Byte-size flags (issue 34.5): every *-bytes flag takes transform(ByteSizeRange(min, max)) in
// place of check(CLI::Range), type_name("SIZE"), and default_str(FormatByteSize(default)) in
// place of capture_default_str(), so --help shows "=4 GiB", not "=4294967296". Input accepts units
// ("64MiB", "4GiB", "512KiB"; a plain number is bytes; common/byte_size.h); a transform runs
// before CLI11 converts the text and leaves the plain byte count behind. A value outside
// [min_bytes, max_bytes] is refused with both bounds written with units.
CLI::Validator ByteSizeRange(int64_t min_bytes, int64_t max_bytes) {
  const std::string range =
      absl::StrCat("[", FormatByteSize(min_bytes), " - ", FormatByteSize(max_bytes), "]");
  return CLI::Validator(
      [min_bytes, max_bytes, range](std::string& text) -> std::string {
        absl::StatusOr<int64_t> bytes = ParseByteSize(text);
        if (!bytes.ok()) return std::string(bytes.status().message());
        if (*bytes < min_bytes || *bytes > max_bytes) {
          return absl::StrCat(text, " is outside ", range);
        }
        text = absl::StrCat(*bytes);
        return std::string();
      },
      absl::StrCat("in ", range));
}

// Booleans read true/false in --help (CLI11 writes a bool's default as 0/1).
void ShowBooleansAsWords(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_type_name() != "BOOLEAN") continue;
    const std::string shown = option->get_default_str();
    if (shown == "0") option->default_str("false");
    if (shown == "1") option->default_str("true");
  }
}

// The gRPC port, its message size, and what one connection may do (streams, keep-alive, pings,
// resets).
void AddGrpcConnectionFlags(CLI::App& app, ServerFlags& flags) {
  app.add_option("--grpc-address", flags.grpc_address, "Address the gRPC server binds")
      ->envname("SLUICE_GRPC_ADDRESS")
      ->capture_default_str()
      ->group(kNetworkGroup);
  app.add_option("--grpc-port", flags.grpc_port,
                 "gRPC port (KServe v2); 0 picks a free port, which is logged")
      ->envname("SLUICE_GRPC_PORT")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str()
      ->group(kNetworkGroup);
  app.add_option("--grpc-max-message-bytes,--max-request-bytes", flags.grpc_max_message_bytes,
                 "Largest gRPC message received or sent, and largest HTTP request body: a larger "
                 "request is refused (RESOURCE_EXHAUSTED; HTTP 413) before it is read into memory")
      ->envname("SLUICE_GRPC_MAX_MESSAGE_BYTES")
      ->transform(ByteSizeRange(int64_t{1024}, int64_t{2147483647}))
      ->type_name("SIZE")
      ->default_str(FormatByteSize(flags.grpc_max_message_bytes))
      ->group(kNetworkGroup);
  app.add_option("--grpc-max-concurrent-streams", flags.grpc_max_concurrent_streams,
                 "Most calls one client connection may have open at once (HTTP/2 "
                 "MAX_CONCURRENT_STREAMS); a client's further calls wait on its side")
      ->envname("SLUICE_GRPC_MAX_CONCURRENT_STREAMS")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str()
      ->group(kNetworkGroup);
  app.add_option("--grpc-keepalive-time-ms", flags.grpc_keepalive_time_ms,
                 "The server pings a connection idle this long, so that calls of a client that "
                 "vanished without closing its connection are cancelled (and their queued "
                 "requests removed)")
      ->envname("SLUICE_GRPC_KEEPALIVE_TIME_MS")
      ->check(CLI::Range(1000, 86400000))
      ->capture_default_str()
      ->group(kNetworkGroup);
  app.add_option("--grpc-keepalive-timeout-ms", flags.grpc_keepalive_timeout_ms,
                 "How long the server waits for a ping's answer before it closes the connection")
      ->envname("SLUICE_GRPC_KEEPALIVE_TIMEOUT_MS")
      ->check(CLI::Range(100, 3600000))
      ->capture_default_str()
      ->group(kNetworkGroup);
  app.add_option("--grpc-min-client-ping-interval-ms", flags.grpc_min_client_ping_interval_ms,
                 "Clients may ping at most this often; a client that pings faster, repeatedly, is "
                 "disconnected (GOAWAY too_many_pings)")
      ->envname("SLUICE_GRPC_MIN_CLIENT_PING_INTERVAL_MS")
      ->check(CLI::Range(1000, 86400000))
      ->capture_default_str()
      ->group(kNetworkGroup);
  app.add_option("--grpc-max-connections", flags.grpc_max_connections,
                 "Connections beyond this (counted as the process's open descriptors above those "
                 "it had at start, and never closer than 64 to the fd limit) are closed as soon "
                 "as they are accepted, so that a connection burst cannot exhaust descriptors; "
                 "0 turns the cap off (the fd-limit reserve still applies)")
      ->envname("SLUICE_GRPC_MAX_CONNECTIONS")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str()
      ->group(kNetworkGroup);
  app.add_option("--grpc-max-resets-per-second", flags.grpc_max_resets_per_second,
                 "A plaintext connection whose client resets more of its new streams than this in "
                 "one second (before ending them, HEADERS + RST_STREAM, or right after sending "
                 "them whole, HEADERS + DATA + RST_STREAM in one read) is sent GOAWAY "
                 "ENHANCE_YOUR_CALM and closed: gRPC 1.51 has no limit of its own (rapid reset, "
                 "CVE-2023-44487); 0 turns the check off. TLS connections are not inspected")
      ->envname("SLUICE_GRPC_MAX_RESETS_PER_SECOND")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str()
      ->group(kNetworkGroup);
}

// The listener watchdog, compressed requests, and the memory gRPC's transport and the streams may
// hold.
void AddGrpcWatchdogAndMemoryFlags(CLI::App& app, ServerFlags& flags) {
  app.add_option("--grpc-watchdog-interval-ms", flags.grpc_watchdog_interval_ms,
                 "How often the server calls itself (ServerLive on a new loopback connection) to "
                 "check that the gRPC port still accepts; 0 turns the watchdog off")
      ->envname("SLUICE_GRPC_WATCHDOG_INTERVAL_MS")
      ->check(CLI::Range(0, 3600000))
      ->capture_default_str()
      ->group(kNetworkGroup);
  app.add_option("--grpc-watchdog-timeout-ms", flags.grpc_watchdog_timeout_ms,
                 "Deadline of one watchdog call")
      ->envname("SLUICE_GRPC_WATCHDOG_TIMEOUT_MS")
      ->check(CLI::Range(10, 600000))
      ->capture_default_str()
      ->group(kNetworkGroup);
  app.add_option("--grpc-watchdog-failures", flags.grpc_watchdog_failures,
                 "Consecutive unanswered watchdog calls after which liveness turns NOT_SERVING")
      ->envname("SLUICE_GRPC_WATCHDOG_FAILURES")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str()
      ->group(kNetworkGroup);
  app.add_option("--grpc-allow-compressed-requests", flags.grpc_allow_compressed_requests,
                 "Accept gzip/deflate-compressed requests; off, they are refused (UNIMPLEMENTED) "
                 "before their message is inflated. On, every request's size limit becomes "
                 "min(--grpc-max-message-bytes, --grpc-max-inflated-message-bytes / 1032): gRPC "
                 "1.51 inflates a whole message before it checks the size, and deflate inflates "
                 "at most 1032-fold")
      ->envname("SLUICE_GRPC_ALLOW_COMPRESSED_REQUESTS")
      ->capture_default_str()
      ->group(kNetworkGroup);
  app.add_option("--grpc-max-inflated-message-bytes", flags.grpc_max_inflated_message_bytes,
                 "With --grpc-allow-compressed-requests: the most memory one compressed request "
                 "may inflate to")
      ->envname("SLUICE_GRPC_MAX_INFLATED_MESSAGE_BYTES")
      ->transform(ByteSizeRange(int64_t{1} << 20, int64_t{1} << 40))
      ->type_name("SIZE")
      ->default_str(FormatByteSize(flags.grpc_max_inflated_message_bytes))
      ->group(kNetworkGroup);
  app.add_option("--grpc-memory-quota-bytes", flags.grpc_memory_quota_bytes,
                 "gRPC resource quota: the memory gRPC's transport may hold (read and write "
                 "buffers, call arenas) for all connections together; near it gRPC drops new "
                 "connections and cancels the streams holding the most")
      ->envname("SLUICE_GRPC_MEMORY_QUOTA_BYTES")
      ->transform(ByteSizeRange(int64_t{16} << 20, int64_t{1} << 44))
      ->type_name("SIZE")
      ->default_str(FormatByteSize(flags.grpc_memory_quota_bytes))
      ->group(kNetworkGroup);
  app.add_option("--grpc-max-stream-pending-bytes", flags.grpc_max_stream_pending_bytes,
                 "Bytes one ModelStreamInfer stream may hold in requests being served and answers "
                 "not yet written before the server stops reading from it")
      ->envname("SLUICE_GRPC_MAX_STREAM_PENDING_BYTES")
      ->transform(ByteSizeRange(int64_t{1} << 16, int64_t{1} << 40))
      ->type_name("SIZE")
      ->default_str(FormatByteSize(flags.grpc_max_stream_pending_bytes))
      ->group(kNetworkGroup);
  app.add_option("--grpc-max-connection-pending-bytes", flags.grpc_max_connection_pending_bytes,
                 "The same over all ModelStreamInfer streams of one connection together: past it, "
                 "every stream of that connection that holds anything stops reading until its "
                 "answers are written (a client that never reads its answers holds at most this)")
      ->envname("SLUICE_GRPC_MAX_CONNECTION_PENDING_BYTES")
      ->transform(ByteSizeRange(int64_t{1} << 16, int64_t{1} << 40))
      ->type_name("SIZE")
      ->default_str(FormatByteSize(flags.grpc_max_connection_pending_bytes))
      ->group(kNetworkGroup);
  app.add_option("--grpc-bdp-probe", flags.grpc_bdp_probe,
                 "Let gRPC grow each stream's receive window to its bandwidth-delay estimate "
                 "(faster large messages over high-latency links); off, a stream's window is 64 "
                 "KiB plus what the server is reading, so a client whose stream stopped being "
                 "read is held by HTTP/2 flow control. On, such a client can make gRPC buffer "
                 "tens of MiB per stream beyond --grpc-max-connection-pending-bytes")
      ->envname("SLUICE_GRPC_BDP_PROBE")
      ->capture_default_str()
      ->group(kNetworkGroup);
  app.add_option("--grpc-max-pending-stream-bytes-total", flags.grpc_max_pending_stream_bytes_total,
                 "The same over all streams together: past it, every stream that holds anything "
                 "stops reading until its answers are written")
      ->envname("SLUICE_GRPC_MAX_PENDING_STREAM_BYTES_TOTAL")
      ->transform(ByteSizeRange(int64_t{1} << 16, int64_t{1} << 44))
      ->type_name("SIZE")
      ->default_str(FormatByteSize(flags.grpc_max_pending_stream_bytes_total))
      ->group(kNetworkGroup);
}

// TLS for the gRPC and HTTP ports alike.
void AddTlsFlags(CLI::App& app, ServerFlags& flags) {
  app.add_option(
         "--tls-cert", flags.tls_cert,
         "PEM certificate (chain) of the gRPC and HTTP ports: with --tls-key, both are served "
         "over TLS only")
      ->envname("SLUICE_TLS_CERT")
      ->group(kTlsGroup);
  app.add_option("--tls-key", flags.tls_key, "PEM private key of --tls-cert")
      ->envname("SLUICE_TLS_KEY")
      ->group(kTlsGroup);
  app.add_option("--tls-ca", flags.tls_ca,
                 "PEM CA(s): clients must present a certificate they signed (mutual TLS); needs "
                 "--tls-cert")
      ->envname("SLUICE_TLS_CA")
      ->group(kTlsGroup);
}

// Where the models are, which load at start-up, how the repository is read.
void AddRepositoryFlags(CLI::App& app, ServerFlags& flags) {
  app.add_option("--model-repository", flags.model_repository,
                 "Model repository folder (<model>/config.pbtxt, <model>/<version>/); without it, "
                 "the source tree's bundled models/ (the start-up log says so)")
      ->envname("SLUICE_MODEL_REPOSITORY")
      ->each([&flags](const std::string&) { flags.model_repository_given = true; })
      ->capture_default_str()
      ->group(kRepositoryGroup);
  app.add_option("--model-control-mode", flags.model_control_mode,
                 "none: load every model at start-up; explicit: load only --load-model ones and "
                 "allow the RepositoryModelLoad/Unload RPCs; poll: load every model at start-up, "
                 "then every --repository-poll-secs load new model folders, reload changed ones "
                 "and unload removed ones (the load/unload RPCs are refused)")
      ->envname("SLUICE_MODEL_CONTROL_MODE")
      ->check(CLI::IsMember({"none", "explicit", "poll"}))
      ->capture_default_str()
      ->group(kRepositoryGroup);
  app.add_option("--repository-poll-secs", flags.repository_poll_secs,
                 "With --model-control-mode=poll: seconds between two scans of the repository; a "
                 "folder loads once a scan finds its files unchanged since the previous one (so "
                 "new or changed models load 1 to 2 intervals after the copy ends)")
      ->envname("SLUICE_REPOSITORY_POLL_SECS")
      ->each([&flags](const std::string&) { flags.repository_poll_secs_given = true; })
      ->check(CLI::Range(1, 86400))
      ->capture_default_str()
      ->group(kRepositoryGroup);
  app.add_option("--load-model", flags.load_models,
                 "With --model-control-mode=explicit: a model to load at start-up (repeatable)")
      ->envname("SLUICE_LOAD_MODEL")
      ->group(kRepositoryGroup);
  app.add_option("--strict-readiness", flags.strict_readiness,
                 "true: the server is ready (/v2/health/ready, ServerReady, the gRPC health "
                 "service) only while every model it was asked to load is ready, so a model that "
                 "failed keeps it not ready; false: ready once start-up is done, whatever the "
                 "models' states (Triton's flag)")
      ->envname("SLUICE_STRICT_READINESS")
      ->capture_default_str()
      ->group(kRepositoryGroup);
  app.add_option("--max-config-bytes", flags.max_config_bytes,
                 "Largest config.pbtxt read; a larger one, or one that is not a regular file, is "
                 "that model's load error")
      ->envname("SLUICE_MAX_CONFIG_BYTES")
      ->transform(ByteSizeRange(int64_t{1024}, int64_t{1} << 30))
      ->type_name("SIZE")
      ->default_str(FormatByteSize(flags.max_config_bytes))
      ->group(kRepositoryGroup);
  app.add_option("--allow-symlinks-out-of-repository", flags.allow_symlinks_out_of_repository,
                 "Follow a model folder, config.pbtxt, version folder or version file that is a "
                 "symlink leading outside the model repository (refused by default)")
      ->envname("SLUICE_ALLOW_SYMLINKS_OUT_OF_REPOSITORY")
      ->capture_default_str()
      ->group(kRepositoryGroup);
  app.add_option("--model-control-queue-size", flags.model_control_queue_size,
                 "Load/unload calls that may wait behind the running one; beyond it they get "
                 "RESOURCE_EXHAUSTED at once")
      ->envname("SLUICE_MODEL_CONTROL_QUEUE_SIZE")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str()
      ->group(kRepositoryGroup);
}

// The per-model queue, the tokenizer stage, and what a model config may ask for.
void AddBatchingFlags(CLI::App& app, ServerFlags& flags) {
  app.add_option("--max-queue-size", flags.max_queue_size,
                 "Requests that may wait per model when its config sets no max_queue_size; "
                 "beyond it requests get RESOURCE_EXHAUSTED at once")
      ->envname("SLUICE_MAX_QUEUE_SIZE")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str()
      ->group(kBatchingGroup);
  app.add_option("--compute-threads", flags.compute_threads,
                 "Threads that compute CPU models' batches, shared by all models: each batch's "
                 "matrix products, attention and row-wise steps are split over them, so one "
                 "request uses every core. 0: one per CPU the process may use (its affinity "
                 "mask, capped by a cgroup CPU quota)")
      ->envname("SLUICE_COMPUTE_THREADS")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str()
      ->group(kBatchingGroup);
  app.add_option("--tokenizer-threads", flags.tokenizer_threads,
                 "Threads that tokenize text inputs (encoder models with a tokenizer) before "
                 "batching, off the gRPC/HTTP threads; shared by all models")
      ->envname("SLUICE_TOKENIZER_THREADS")
      ->check(CLI::Range(1, 256))
      ->capture_default_str()
      ->group(kBatchingGroup);
  app.add_option("--tokenizer-queue-size", flags.tokenizer_queue_size,
                 "Text requests that may wait for a tokenizer thread; beyond it requests get "
                 "RESOURCE_EXHAUSTED at once")
      ->envname("SLUICE_TOKENIZER_QUEUE_SIZE")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str()
      ->group(kBatchingGroup);
  app.add_option("--max-model-batch-size", flags.load_limits.max_batch_size,
                 "Largest max_batch_size a model config may declare; a larger one is that "
                 "model's load error")
      ->envname("SLUICE_MAX_MODEL_BATCH_SIZE")
      ->check(CLI::Range(1, 2147483647))
      ->capture_default_str()
      ->group(kBatchingGroup);
  app.add_option("--max-tensor-bytes", flags.load_limits.max_tensor_bytes,
                 "Largest input or output a model config may declare, in bytes at its "
                 "max_batch_size (fixed dims)")
      ->envname("SLUICE_MAX_TENSOR_BYTES")
      ->transform(ByteSizeRange(int64_t{1}, int64_t{1} << 50))
      ->type_name("SIZE")
      ->default_str(FormatByteSize(flags.load_limits.max_tensor_bytes))
      ->group(kBatchingGroup);
  app.add_option("--max-batch-bytes", flags.load_limits.max_batch_bytes,
                 "Largest batch a model config may declare: every input and output at its "
                 "max_batch_size, in bytes")
      ->envname("SLUICE_MAX_BATCH_BYTES")
      ->transform(ByteSizeRange(int64_t{1}, int64_t{1} << 50))
      ->type_name("SIZE")
      ->default_str(FormatByteSize(flags.load_limits.max_batch_bytes))
      ->group(kBatchingGroup);
  app.add_option("--max-model-instances", flags.load_limits.max_instances,
                 "Most instances (instance_group count) one model version may have")
      ->envname("SLUICE_MAX_MODEL_INSTANCES")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str()
      ->group(kBatchingGroup);
  app.add_option("--max-model-threads", flags.load_limits.max_threads,
                 "Most threads one model version's load may start (2 per instance and its "
                 "batcher)")
      ->envname("SLUICE_MAX_MODEL_THREADS")
      ->check(CLI::Range(3, 1 << 17))
      ->capture_default_str()
      ->group(kBatchingGroup);
  app.add_option("--max-model-load-bytes", flags.load_limits.max_load_bytes,
                 "Most memory one model version's load may allocate up front (warm-up batches, "
                 "backend scratch, weights), in bytes")
      ->envname("SLUICE_MAX_MODEL_LOAD_BYTES")
      ->transform(ByteSizeRange(int64_t{1}, int64_t{1} << 50))
      ->type_name("SIZE")
      ->default_str(FormatByteSize(flags.load_limits.max_load_bytes))
      ->group(kBatchingGroup);
}

// Where models run, and the batches in flight per instance there.
void AddDeviceFlags(CLI::App& app, ServerFlags& flags) {
  app.add_option("--device", flags.device,
                 "Where models run: auto (a GPU if one is usable, else the CPU), cpu, or cuda:N")
      ->envname("SLUICE_DEVICE")
      ->capture_default_str()
      ->group(kDeviceGroup);
  app.add_option("--executor-slots", flags.executor_slots,
                 "Batches in flight per model instance on the CPU backend (staging buffers each)")
      ->envname("SLUICE_EXECUTOR_SLOTS")
      ->check(CLI::Range(1, 16))
      ->capture_default_str()
      ->group(kDeviceGroup);
  app.add_option("--gpu-executor-slots", flags.gpu_executor_slots,
                 "Batches in flight per model instance on a GPU, each with its own pinned and "
                 "device buffers and CUDA graphs: 3 lets one batch copy in while one computes and "
                 "one copies out")
      ->envname("SLUICE_GPU_EXECUTOR_SLOTS")
      ->check(CLI::Range(1, 16))
      ->capture_default_str()
      ->group(kDeviceGroup);
  app.add_option("--cpu-batcher-runs-batches", flags.cpu_batcher_runs_batches,
                 "A model with one CPU instance computes and answers its batches on its batcher "
                 "thread (no hand-off between the queue and the answers; one batch at a time); "
                 "false: on the executor's own issue and completion threads (--executor-slots "
                 "batches in flight), as models with several instances always do")
      ->envname("SLUICE_CPU_BATCHER_RUNS_BATCHES")
      ->capture_default_str()
      ->group(kDeviceGroup);
}

// The HTTP/REST port, its connections, timeouts and body limits.
void AddHttpFlags(CLI::App& app, ServerFlags& flags) {
  app.add_option("--allow-http", flags.allow_http,
                 "Serve the KServe v2 HTTP/REST protocol (--http-port); false turns it off")
      ->envname("SLUICE_ALLOW_HTTP")
      ->capture_default_str()
      ->group(kHttpGroup);
  app.add_option("--http-address", flags.http_address, "IP address the HTTP server binds")
      ->envname("SLUICE_HTTP_ADDRESS")
      ->capture_default_str()
      ->group(kHttpGroup);
  app.add_option("--http-port", flags.http_port,
                 "HTTP/REST port (KServe v2); 0 picks a free port, which is logged. TLS with "
                 "the same --tls-* flags as gRPC; bodies are limited by --max-request-bytes")
      ->envname("SLUICE_HTTP_PORT")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str()
      ->group(kHttpGroup);
  app.add_option("--http-threads", flags.http_threads,
                 "HTTP I/O threads; each serves many connections (none is held per connection)")
      ->envname("SLUICE_HTTP_THREADS")
      ->check(CLI::Range(1, 64))
      ->capture_default_str()
      ->group(kHttpGroup);
  app.add_option("--http-max-connections", flags.http_max_connections,
                 "HTTP connections open at once; one more is answered 503 and closed")
      ->envname("SLUICE_HTTP_MAX_CONNECTIONS")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str()
      ->group(kHttpGroup);
  app.add_option("--http-idle-timeout-ms", flags.http_idle_timeout_ms,
                 "A keep-alive HTTP connection idle this long between requests is closed")
      ->envname("SLUICE_HTTP_IDLE_TIMEOUT_MS")
      ->check(CLI::Range(100, 3600000))
      ->capture_default_str()
      ->group(kHttpGroup);
  app.add_option("--http-header-timeout-ms", flags.http_header_timeout_ms,
                 "From a request's first byte to the end of its header, and on a new connection "
                 "from the connect to its first byte (a client that trickles, or connects and "
                 "says nothing, is cut off)")
      ->envname("SLUICE_HTTP_HEADER_TIMEOUT_MS")
      ->check(CLI::Range(100, 3600000))
      ->capture_default_str()
      ->group(kHttpGroup);
  app.add_option("--http-body-timeout-ms", flags.http_body_timeout_ms,
                 "From the end of a request's header to the end of its body")
      ->envname("SLUICE_HTTP_BODY_TIMEOUT_MS")
      ->check(CLI::Range(100, 3600000))
      ->capture_default_str()
      ->group(kHttpGroup);
  app.add_option("--http-max-body-bytes", flags.http_max_body_bytes,
                 "Largest HTTP request body (the lower of this and --max-request-bytes applies): "
                 "a larger one is answered 413 from its Content-Length, before it is read")
      ->envname("SLUICE_HTTP_MAX_BODY_BYTES")
      ->transform(ByteSizeRange(int64_t{1024}, int64_t{1} << 40))
      ->type_name("SIZE")
      ->default_str(FormatByteSize(flags.http_max_body_bytes))
      ->group(kHttpGroup);
  app.add_option("--http-max-inflight-bytes", flags.http_max_inflight_bytes,
                 "HTTP request bodies held at once, all connections together (being read, queued, "
                 "running, being answered); a request that does not fit is answered 503 with "
                 "Retry-After before its body is read. At least the largest body")
      ->envname("SLUICE_HTTP_MAX_INFLIGHT_BYTES")
      ->transform(ByteSizeRange(int64_t{1024}, int64_t{1} << 42))
      ->type_name("SIZE")
      ->default_str(FormatByteSize(flags.http_max_inflight_bytes))
      ->group(kHttpGroup);
  app.add_option("--http-max-json-bytes", flags.http_max_json_bytes,
                 "Largest JSON part of an HTTP infer request (it is parsed on an I/O thread); a "
                 "larger one is answered 413. Large tensors go in the binary tensor extension")
      ->envname("SLUICE_HTTP_MAX_JSON_BYTES")
      ->transform(ByteSizeRange(int64_t{1024}, int64_t{1} << 32))
      ->type_name("SIZE")
      ->default_str(FormatByteSize(flags.http_max_json_bytes))
      ->group(kHttpGroup);
  app.add_option("--text-max-client-batch-size", flags.text_max_client_batch_size,
                 "Inputs of one TEI /embed or /predict request, texts of one TEI /rerank (TEI's "
                 "max_client_batch_size); more are answered 413")
      ->envname("SLUICE_TEXT_MAX_CLIENT_BATCH_SIZE")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str()
      ->group(kHttpGroup);
  app.add_option("--text-max-rerank-documents", flags.text_max_rerank_documents,
                 "Documents of one Cohere/Jina rerank request (/v1/rerank, /v2/rerank); more are "
                 "answered 413")
      ->envname("SLUICE_TEXT_MAX_RERANK_DOCUMENTS")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str()
      ->group(kHttpGroup);
}

// The log, access-log sampling, the Prometheus port and the stats collector.
void AddLoggingAndMetricsFlags(CLI::App& app, ServerFlags& flags) {
  app.add_option("--log-format", flags.log_format, "Log lines as text or json")
      ->envname("SLUICE_LOG_FORMAT")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str()
      ->group(kLoggingGroup);
  app.add_option("--log-level", flags.log_level, "debug, info, warning or error")
      ->envname("SLUICE_LOG_LEVEL")
      ->check(CLI::IsMember({"debug", "info", "warning", "error"}))
      ->capture_default_str()
      ->group(kLoggingGroup);
  app.add_option("--log-queue-capacity", flags.log_queue_capacity,
                 "Log records waiting for the writer thread; beyond it records are dropped and "
                 "counted, never waited for")
      ->envname("SLUICE_LOG_QUEUE_CAPACITY")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str()
      ->group(kLoggingGroup);
  app.add_option("--access-log-sample-rate", flags.access_log_sample_rate,
                 "Fraction of requests (0..1) that get an access-log record at info level (model, "
                 "version, id, batch, queue and compute time, status)")
      ->envname("SLUICE_ACCESS_LOG_SAMPLE_RATE")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str()
      ->group(kLoggingGroup);
  app.add_option("--allow-metrics", flags.allow_metrics,
                 "Serve Prometheus metrics (and run the stats collector); false turns both off")
      ->envname("SLUICE_ALLOW_METRICS")
      ->capture_default_str()
      ->group(kLoggingGroup);
  app.add_option("--metrics-address", flags.metrics_address,
                 "Address the metrics HTTP server binds")
      ->envname("SLUICE_METRICS_ADDRESS")
      ->capture_default_str()
      ->group(kLoggingGroup);
  app.add_option("--metrics-port", flags.metrics_port,
                 "Prometheus metrics port (path /metrics); 0 picks a free port, which is logged")
      ->envname("SLUICE_METRICS_PORT")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str()
      ->group(kLoggingGroup);
  app.add_option("--metrics-interval-ms", flags.metrics_interval_ms,
                 "How often the stats collector reads the executors' (device) counters and "
                 "updates sluice_device_items_total and sluice_throughput_items_per_second; "
                 "0 turns the collector off")
      ->envname("SLUICE_METRICS_INTERVAL_MS")
      ->check(CLI::Range(int64_t{0}, int64_t{3600000}))
      ->capture_default_str()
      ->group(kLoggingGroup);
  app.add_option("--metrics-http-threads", flags.metrics_http_threads,
                 "Worker threads of the metrics HTTP server; each serves one connection at a "
                 "time, so this many slow clients at once can delay a scrape")
      ->envname("SLUICE_METRICS_HTTP_THREADS")
      ->check(CLI::Range(1, 256))
      ->capture_default_str()
      ->group(kLoggingGroup);
  app.add_option("--metrics-request-timeout-ms", flags.metrics_request_timeout_ms,
                 "The metrics HTTP server drops a connection that has not sent its request "
                 "(headers included) within this time, or keeps it idle this long")
      ->envname("SLUICE_METRICS_REQUEST_TIMEOUT_MS")
      ->check(CLI::Range(100, 600000))
      ->capture_default_str()
      ->group(kLoggingGroup);
}

// Shared-memory tensors (Triton's system / CUDA shared-memory extensions, issue 16).
void AddSharedMemoryFlags(CLI::App& app, ServerFlags& flags) {
  app.add_option("--shared-memory-max-regions", flags.shared_memory_max_regions,
                 "Shared-memory regions (system and CUDA together) clients may have registered "
                 "at once; 0 turns the shared-memory extensions off")
      ->envname("SLUICE_SHARED_MEMORY_MAX_REGIONS")
      ->check(CLI::Range(0, 65536))
      ->capture_default_str()
      ->group(kSharedMemoryGroup);
  app.add_option("--shared-memory-max-bytes", flags.shared_memory_max_bytes,
                 "Bytes of client shared memory mapped at once (registered regions, those "
                 "unregistered but still used by a request, and output regions' writable "
                 "mappings); a registration past it is refused")
      ->envname("SLUICE_SHARED_MEMORY_MAX_BYTES")
      ->transform(ByteSizeRange(int64_t{0}, int64_t{1} << 50))
      ->type_name("SIZE")
      ->default_str(FormatByteSize(flags.shared_memory_max_bytes))
      ->group(kSharedMemoryGroup);
}

// The SIGTERM/SIGINT drain.
void AddShutdownFlags(CLI::App& app, ServerFlags& flags) {
  app.add_option("--exit-timeout-secs,--exit-timeout", flags.exit_timeout_secs,
                 "On SIGTERM/SIGINT, how long queued and in-flight requests may take to finish")
      ->envname("SLUICE_EXIT_TIMEOUT_SECS")
      ->check(CLI::Range(0, 3600))
      ->capture_default_str()
      ->group(kShutdownGroup);
}

}  // namespace

void AddServerFlags(CLI::App& app, ServerFlags& flags) {
  AddGrpcConnectionFlags(app, flags);
  AddGrpcWatchdogAndMemoryFlags(app, flags);
  AddTlsFlags(app, flags);
  AddRepositoryFlags(app, flags);
  AddBatchingFlags(app, flags);
  AddDeviceFlags(app, flags);
  AddHttpFlags(app, flags);
  AddLoggingAndMetricsFlags(app, flags);
  AddSharedMemoryFlags(app, flags);
  AddShutdownFlags(app, flags);
  ShowBooleansAsWords(app);
}

}  // namespace sluice::server
