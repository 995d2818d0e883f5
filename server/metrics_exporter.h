#pragma once

// MetricsExporter: serves Prometheus metrics over HTTP (prometheus-cpp's Exposer, a civetweb
// server) on `--metrics-port`, path /metrics. Nothing is recorded here: at scrape time, on the HTTP
// thread, it takes the engine's stats snapshot (engine::Engine::GetStats, plain C++ types), the
// logger's drop count, the process's /proc readings and, where a GpuMetricsSource is given, the
// GPUs' readings, and maps them to metric families named as ARCHITECTURE §5 says. The request
// path never touches a Prometheus object, and a scrape costs the engine one short lock per model
// version (the snapshot copy).
//
// Owned by main; borrows the engine and the logger, which must outlive it. Thread-safety: every
// method may be called from any thread; scrapes run on the Exposer's threads (one listener thread
// and `http_threads` workers, all started and joined by the Exposer).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "prometheus/metric_family.h"

namespace prometheus {
class Exposer;
}

namespace sluice::common {
class Logger;
}

namespace sluice::server {

// What the process's memory allocator says of its heap. RSS alone cannot tell a leak from an
// allocator's cache (tcmalloc keeps freed memory for reuse and returns it slowly): the
// allocated bytes can.
struct HeapSample {
  std::string allocator;       // "tcmalloc" or "glibc"
  double allocated_bytes = 0;  // handed out to the program and not freed: the live heap
  double heap_bytes = 0;       // held from the operating system: the live heap plus free memory
};
// Asks whichever allocator this process runs on: tcmalloc's MallocExtension when it is loaded
// (looked up at run time, so that binaries without it link too), else glibc's mallinfo2().
// Absent on neither, and in sanitizer builds (their allocator replaces malloc). Cost: tcmalloc's
// is a few reads; mallinfo2() walks every arena's free lists under its lock, which is why it is
// read at scrape time only.
std::optional<HeapSample> ReadHeapSample();

// Readings of this process, from /proc/self (Linux). Prometheus' standard process_* metrics;
// prometheus-cpp has no process collector.
struct ProcessSample {
  double resident_memory_bytes = 0;
  double virtual_memory_bytes = 0;
  double cpu_seconds = 0;  // user + system
  double open_fds = 0;
  double max_fds = 0;             // the soft RLIMIT_NOFILE
  double start_time_seconds = 0;  // since the Unix epoch
  // The memory allocator's own account (ReadHeapSample); absent when it gives none.
  std::optional<HeapSample> heap;
};
// Internal if /proc cannot be read or parsed (not Linux, or /proc not mounted).
absl::StatusOr<ProcessSample> ReadProcessSample();

// One GPU's readings.
struct GpuSample {
  int index = 0;
  std::string uuid;
  uint64_t memory_used_bytes = 0;
  uint64_t memory_total_bytes = 0;
  double utilization_ratio = 0;  // 0..1, over the driver's last sample period
};

// Where GPU readings come from: NVML where the NVIDIA driver is installed (NvmlGpuSource,
// nvml_gpu_source.h). Without one no sluice_gpu_* family is exported at all (no made-up zeros).
// Sample() runs at scrape time on an HTTP thread; it must be thread-safe and return quickly
// (NVML queries are), and never touch a CUDA stream.
class GpuMetricsSource {
 public:
  virtual ~GpuMetricsSource() = default;
  virtual std::vector<GpuSample> Sample() = 0;
};

// The shared-memory registry's readings (server/shared_memory; plain numbers, so that the
// exporter does not depend on that module).
struct SharedMemorySample {
  int64_t system_regions = 0;
  int64_t cuda_regions = 0;
  uint64_t mapped_bytes = 0;
  // Unregistered regions still mapped because a request uses them.
  int64_t draining_regions = 0;
};

// One model version's lifecycle state, as the model repository's index gives it: every model
// asked to load, failed ones included (ModelRepository::RequestedModelStates; plain strings, so
// that the exporter does not depend on the repository).
struct ModelStateSample {
  std::string model;
  std::string version;  // empty when the failure concerns the whole model (its config)
  std::string state;    // LOADING, READY, UNAVAILABLE or UNLOADING
};

// Everything one scrape maps.
struct MetricsInput {
  std::vector<engine::Engine::VersionStats> models;
  uint64_t log_dropped = 0;
  std::optional<ProcessSample> process;        // absent: no process_* families
  std::optional<std::vector<GpuSample>> gpus;  // absent (no source): no sluice_gpu_* families
  // Open ModelInfer / ModelStreamInfer calls; absent: no sluice_grpc_infer_calls_active.
  std::optional<int64_t> active_infer_calls;
  // Open HTTP infer requests; absent: no sluice_http_infer_requests_active.
  std::optional<int64_t> active_http_infer_requests;

  // Absent: no sluice_shared_memory_* families.
  std::optional<SharedMemorySample> shared_memory;
  // Absent: no sluice_model_state family.
  std::optional<std::vector<ModelStateSample>> model_states;
};

// The metric families for `input` (pure; the exporter's whole mapping). Every model version gets
// every series, zeros included (each failure reason too), so dashboards and rate() work from the
// first scrape. Histogram buckets are the engine's fixed bounds, cumulative, with +Inf.
std::vector<prometheus::MetricFamily> BuildMetricFamilies(const MetricsInput& input);

// `families` in the Prometheus text exposition format, as /metrics serves them.
std::string SerializeText(const std::vector<prometheus::MetricFamily>& families);

struct MetricsExporterOptions {
  // Address the HTTP server binds ("0.0.0.0" all IPv4, "127.0.0.1", "::" all IPv6).
  std::string address = "0.0.0.0";
  // TCP port; 0 picks a free one (see port()).
  int port = 8002;
  // Worker threads that answer scrapes (besides civetweb's listener thread). civetweb gives each
  // worker one connection at a time, so this many clients that send their request slowly hold
  // every worker; with 2 two half-sent requests stalled every scrape for 30 s.
  size_t http_threads = 8;
  // civetweb's request_timeout_ms: a connection that has not sent its whole request (headers
  // included) within this time is dropped, and so is one idle this long, freeing its worker.
  // civetweb's own default is 30 s.
  int request_timeout_ms = 2000;
  // GPU readings; borrowed, nullable (none: no GPU families). Must outlive the exporter.
  GpuMetricsSource* gpu_source = nullptr;
  // The gRPC service's count of open inference calls (ServiceOptions::active_infer_calls);
  // borrowed, nullable, must outlive the exporter.
  const std::atomic<int64_t>* active_infer_calls = nullptr;
  // The HTTP routes' count of open infer requests (HttpRoutesOptions::active_infer_requests);
  // borrowed, nullable, must outlive the exporter.
  const std::atomic<int64_t>* active_http_infer_requests = nullptr;

  // Reads the shared-memory registry at scrape time (fast: one short lock); null: no
  // sluice_shared_memory_* families. Must stay callable while the exporter lives.
  std::function<SharedMemorySample()> shared_memory;

  // Reads the models' lifecycle states at scrape time (the repository's index: one short lock and
  // a directory listing); null: no sluice_model_state family. Must stay callable while the
  // exporter lives.
  std::function<std::vector<ModelStateSample>()> model_states;
};

class MetricsExporter {
 public:
  // Binds and starts serving /metrics. `engine` is borrowed and must outlive the exporter;
  // `logger` is borrowed and nullable (then sluice_log_dropped_total reads 0). Unavailable if the
  // address cannot be bound (port in use, bad address), naming it.
  static absl::StatusOr<std::unique_ptr<MetricsExporter>> Start(const engine::Engine& engine,
                                                                const common::Logger* logger,
                                                                MetricsExporterOptions options);
  // Stops the HTTP server (waits for a scrape in progress, joins its threads).
  ~MetricsExporter();
  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;

  // The bound port (the picked one when options.port was 0).
  int port() const { return port_; }

  // The families a scrape would return now.
  std::vector<prometheus::MetricFamily> Collect() const;

 private:
  class EngineCollectable;
  MetricsExporter(std::shared_ptr<EngineCollectable> collectable,
                  std::unique_ptr<prometheus::Exposer> exposer, std::string wake_address, int port);

  const std::shared_ptr<EngineCollectable> collectable_;
  std::unique_ptr<prometheus::Exposer> exposer_;  // reset first by the destructor
  // A loopback or bound address that reaches the listener (to wake it at shutdown).
  const std::string wake_address_;
  const int port_;
};

}  // namespace sluice::server
