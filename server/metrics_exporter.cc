#include "server/metrics_exporter.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <exception>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/log.h"
#include "engine/core/model_stats.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"
#include "prometheus/text_serializer.h"

namespace sluice::server {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

void AddCounter(MetricFamily& family, Labels labels, double value) {
  ClientMetric metric;
  metric.label = std::move(labels);
  metric.counter.value = value;
  family.metric.push_back(std::move(metric));
}

void AddGauge(MetricFamily& family, Labels labels, double value) {
  ClientMetric metric;
  metric.label = std::move(labels);
  metric.gauge.value = value;
  family.metric.push_back(std::move(metric));
}

// Engine histograms keep per-bucket counts; Prometheus wants cumulative ones, ending at +Inf.
template <size_t N>
void AddHistogram(MetricFamily& family, Labels labels, const std::array<double, N>& bounds,
                  const engine::FixedHistogram<N>& histogram) {
  ClientMetric metric;
  metric.label = std::move(labels);
  metric.histogram.sample_count = histogram.count;
  metric.histogram.sample_sum = histogram.sum;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < N; ++i) {
    cumulative += histogram.counts[i];
    metric.histogram.bucket.push_back({cumulative, bounds[i]});
  }
  cumulative += histogram.counts[N];
  metric.histogram.bucket.push_back({cumulative, std::numeric_limits<double>::infinity()});
  family.metric.push_back(std::move(metric));
}

// Opens and closes one TCP connection to address:port (IPv4 or IPv6 literal); errors ignored.
void Poke(const std::string& address, int port) {
  sockaddr_storage storage{};
  socklen_t length = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    length = sizeof(*v4);
  } else if (inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    length = sizeof(*v6);
  } else {
    return;
  }
  const int fd = socket(storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  connect(fd, reinterpret_cast<sockaddr*>(&storage), length);
  close(fd);
}

Labels With(Labels labels, std::string name, std::string value) {
  labels.push_back({std::move(name), std::move(value)});
  return labels;
}

}  // namespace

std::optional<HeapSample> ReadHeapSample() {
#if defined(SLUICE_SANITIZER_BUILD)
  // The sanitizer's allocator replaces malloc, and glibc's account would describe an idle heap.
  return std::nullopt;
#else
  // gperftools' C API (gperftools/malloc_extension_c.h): returns 1 when the property exists.
  using GetNumericProperty = int (*)(const char* property, size_t* value);
  static const auto tcmalloc_property = reinterpret_cast<GetNumericProperty>(
      dlsym(RTLD_DEFAULT, "MallocExtension_GetNumericProperty"));
  if (tcmalloc_property != nullptr) {
    size_t allocated = 0;
    size_t heap = 0;
    if (tcmalloc_property("generic.current_allocated_bytes", &allocated) == 0 ||
        tcmalloc_property("generic.heap_size", &heap) == 0) {
      return std::nullopt;
    }
    return HeapSample{.allocator = "tcmalloc",
                      .allocated_bytes = static_cast<double>(allocated),
                      .heap_bytes = static_cast<double>(heap)};
  }
#if defined(__GLIBC__)
  // uordblks: bytes in use from the arenas; hblkhd: bytes in blocks mmap()ed one by one (large
  // allocations); arena: bytes the arenas hold from sbrk/mmap.
  const struct mallinfo2 info = mallinfo2();
  return HeapSample{.allocator = "glibc",
                    .allocated_bytes = static_cast<double>(info.uordblks + info.hblkhd),
                    .heap_bytes = static_cast<double>(info.arena + info.hblkhd)};
#else
  return std::nullopt;
#endif
#endif  // SLUICE_SANITIZER_BUILD
}

absl::StatusOr<ProcessSample> ReadProcessSample() {
  // /proc/self/stat: "pid (comm) state ppid ..."; comm may hold spaces and parentheses, so the
  // fields are counted from the last ')'. Field numbers as in proc(5).
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return absl::InternalError("cannot parse /proc/self/stat");
  const std::vector<std::string> fields =
      absl::StrSplit(stat.substr(close + 2), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state); field k is fields[k - 3].
  auto field = [&](int k, double& out) {
    uint64_t value = 0;
    if (static_cast<size_t>(k - 3) >= fields.size() || !absl::SimpleAtoi(fields[k - 3], &value)) {
      return false;
    }
    out = static_cast<double>(value);
    return true;
  };
  double utime = 0, stime = 0, start_ticks = 0, vsize = 0, rss_pages = 0;
  if (!field(14, utime) || !field(15, stime) || !field(22, start_ticks) || !field(23, vsize) ||
      !field(24, rss_pages)) {
    return absl::InternalError("cannot parse /proc/self/stat");
  }
  const double ticks_per_second = static_cast<double>(sysconf(_SC_CLK_TCK));
  ProcessSample sample;
  sample.cpu_seconds = (utime + stime) / ticks_per_second;
  sample.virtual_memory_bytes = vsize;
  sample.resident_memory_bytes = rss_pages * static_cast<double>(sysconf(_SC_PAGESIZE));

  // Start time: boot time (btime in /proc/stat) + start ticks since boot.
  std::ifstream proc_stat("/proc/stat");
  std::string line;
  while (std::getline(proc_stat, line)) {
    uint64_t btime = 0;
    if (line.rfind("btime ", 0) == 0 && absl::SimpleAtoi(line.substr(6), &btime)) {
      sample.start_time_seconds = static_cast<double>(btime) + start_ticks / ticks_per_second;
    }
  }

  if (DIR* dir = opendir("/proc/self/fd"); dir != nullptr) {
    int entries = 0;
    while (const dirent* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') ++entries;
    }
    closedir(dir);
    sample.open_fds = entries - 1;  // less the descriptor opendir itself holds
  }
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    sample.max_fds = limit.rlim_cur == RLIM_INFINITY ? std::numeric_limits<double>::infinity()
                                                     : static_cast<double>(limit.rlim_cur);
  }
  sample.heap = ReadHeapSample();
  return sample;
}

namespace {

// The labels of one model version's metrics.
Labels ModelLabels(const engine::Engine::VersionStats& entry) {
  return {{"model", entry.name}, {"version", absl::StrCat(entry.version)}};
}

// Per model: requests answered by outcome (and failure reason), and items inferred.
void AppendRequestFamilies(const MetricsInput& input, std::vector<MetricFamily>& families) {
  MetricFamily requests = Family(
      "sluice_inference_requests_total",
      "Inference requests answered, by outcome (success, failure) and, for failures, reason "
      "(invalid_argument, queue_full, deadline_exceeded, unavailable, internal, cancelled, other)",
      MetricType::Counter);
  MetricFamily items =
      Family("sluice_inference_items_total",
             "Items inferred successfully (a request of batch 4 counts 4)", MetricType::Counter);
  for (const engine::Engine::VersionStats& entry : input.models) {
    const engine::ModelStatsSnapshot& s = entry.stats;
    const Labels model = ModelLabels(entry);
    AddCounter(requests, With(model, "outcome", "success"), static_cast<double>(s.success.count));
    for (size_t r = 0; r < engine::kFailureReasonCount; ++r) {
      Labels labels = With(model, "outcome", "failure");
      labels.push_back({"reason", std::string(engine::FailureReasonName(
                                      static_cast<engine::FailureReason>(r)))});
      AddCounter(requests, std::move(labels), static_cast<double>(s.failures_by_reason[r]));
    }
    AddCounter(items, model, static_cast<double>(s.inference_count));
  }
  families.push_back(std::move(requests));
  families.push_back(std::move(items));
}

// Per model: batches executed, their sizes (items and real tokens), and the queue's depth.
void AppendBatchFamilies(const MetricsInput& input, std::vector<MetricFamily>& families) {
  MetricFamily batches =
      Family("sluice_batches_total", "Batches executed by the model", MetricType::Counter);
  MetricFamily batch_size =
      Family("sluice_batch_size", "Items per executed batch", MetricType::Histogram);
  MetricFamily batch_tokens = Family(
      "sluice_batch_tokens",
      "Real tokens per batch handed to an executor (models with ragged token-budget batching)",
      MetricType::Histogram);
  MetricFamily queue_depth =
      Family("sluice_queue_depth", "Requests waiting in the model's queue", MetricType::Gauge);
  for (const engine::Engine::VersionStats& entry : input.models) {
    const engine::ModelStatsSnapshot& s = entry.stats;
    const Labels model = ModelLabels(entry);
    AddCounter(batches, model, static_cast<double>(s.execution_count));
    AddHistogram(batch_size, model, engine::kBatchSizeBucketBounds, s.batch_size);
    if (s.counts_tokens) {
      AddHistogram(batch_tokens, model, engine::kBatchTokensBucketBounds, s.batch_tokens);
    }
    AddGauge(queue_depth, model, static_cast<double>(s.queue_depth));
  }
  for (MetricFamily* family : {&batches, &batch_size, &batch_tokens, &queue_depth}) {
    families.push_back(std::move(*family));
  }
}

// Per model: where successful requests spent their time (end to end, queue, tokenizer) and each
// batch's compute phases.
void AppendLatencyFamilies(const MetricsInput& input, std::vector<MetricFamily>& families) {
  MetricFamily request_duration =
      Family("sluice_request_duration_seconds",
             "Successful requests' time from receipt by the engine to their answer",
             MetricType::Histogram);
  MetricFamily queue_duration =
      Family("sluice_queue_duration_seconds",
             "Successful requests' time in the model's queue (enqueued to batch dispatch)",
             MetricType::Histogram);
  MetricFamily tokenize_duration =
      Family("sluice_tokenize_duration_seconds",
             "Text requests' time from validation to enqueue into the batcher: the wait for a "
             "tokenizer thread plus tokenization (encoder models with a tokenizer)",
             MetricType::Histogram);
  MetricFamily compute_duration = Family(
      "sluice_compute_duration_seconds",
      "Per executed batch, time of each compute phase: input (gather inputs / copy to device), "
      "infer (run the model), output (scatter outputs / copy from device)",
      MetricType::Histogram);
  for (const engine::Engine::VersionStats& entry : input.models) {
    const engine::ModelStatsSnapshot& s = entry.stats;
    const Labels model = ModelLabels(entry);
    AddHistogram(request_duration, model, engine::kDurationBucketBoundsSeconds, s.request_duration);
    AddHistogram(queue_duration, model, engine::kDurationBucketBoundsSeconds, s.queue_duration);
    if (s.tokenize_duration.count > 0) {
      AddHistogram(tokenize_duration, model, engine::kDurationBucketBoundsSeconds,
                   s.tokenize_duration);
    }
    AddHistogram(compute_duration, With(model, "phase", "input"),
                 engine::kDurationBucketBoundsSeconds, s.compute_input_duration);
    AddHistogram(compute_duration, With(model, "phase", "infer"),
                 engine::kDurationBucketBoundsSeconds, s.compute_infer_duration);
    AddHistogram(compute_duration, With(model, "phase", "output"),
                 engine::kDurationBucketBoundsSeconds, s.compute_output_duration);
  }
  for (MetricFamily* family :
       {&request_duration, &queue_duration, &tokenize_duration, &compute_duration}) {
    families.push_back(std::move(*family));
  }
}

// Per model: what the stats collector reads from the executors (device counters on a GPU).
void AppendDeviceFamilies(const MetricsInput& input, std::vector<MetricFamily>& families) {
  MetricFamily device_items = Family(
      "sluice_device_items_total",
      "Items counted by the executors where they compute (device counters on a GPU), read by the "
      "stats collector every --metrics-interval-ms",
      MetricType::Counter);
  MetricFamily throughput =
      Family("sluice_throughput_items_per_second",
             "Items per second over the stats collector's last interval (--metrics-interval-ms)",
             MetricType::Gauge);
  for (const engine::Engine::VersionStats& entry : input.models) {
    const engine::ModelStatsSnapshot& s = entry.stats;
    const Labels model = ModelLabels(entry);
    AddCounter(device_items, model, static_cast<double>(s.device_items));
    AddGauge(throughput, model, s.throughput_items_per_second);
  }
  families.push_back(std::move(device_items));
  families.push_back(std::move(throughput));
}

// The process's own: log records dropped, and the inference calls open on each protocol.
void AppendServerFamilies(const MetricsInput& input, std::vector<MetricFamily>& families) {
  MetricFamily log_dropped =
      Family("sluice_log_dropped_total",
             "Log records dropped because the logger's queue was full (--log-queue-capacity)",
             MetricType::Counter);
  AddCounter(log_dropped, {}, static_cast<double>(input.log_dropped));
  families.push_back(std::move(log_dropped));

  if (input.active_infer_calls.has_value()) {
    MetricFamily calls = Family(
        "sluice_grpc_infer_calls_active",
        "ModelInfer and ModelStreamInfer calls open in the server: received and not yet done "
        "(queued, running, being answered, or a stream still open)",
        MetricType::Gauge);
    AddGauge(calls, {}, static_cast<double>(*input.active_infer_calls));
    families.push_back(std::move(calls));
  }
  // HTTP's twin, not a protocol label on the gRPC family: that name says gRPC, and dashboards
  // and alerts already read it unlabelled.
  if (input.active_http_infer_requests.has_value()) {
    MetricFamily requests =
        Family("sluice_http_infer_requests_active",
               "KServe v2 HTTP infer requests open in the server: received and not yet answered "
               "(being converted, queued, running, or being encoded)",
               MetricType::Gauge);
    AddGauge(requests, {}, static_cast<double>(*input.active_http_infer_requests));
    families.push_back(std::move(requests));
  }
}

// Each model version's lifecycle state, one-hot over the four states, so that an alert can fire on
// `sluice_model_state{state="unavailable"} == 1` and a dashboard can count models per state.
void AppendModelStateFamily(const std::vector<ModelStateSample>& samples,
                            std::vector<MetricFamily>& families) {
  static constexpr std::array<std::pair<const char*, const char*>, 4> kStates = {{
      {"LOADING", "loading"},
      {"READY", "ready"},
      {"UNAVAILABLE", "unavailable"},
      {"UNLOADING", "unloading"},
  }};
  MetricFamily state = Family(
      "sluice_model_state",
      "1 for the state a model version is in (loading, ready, unavailable, unloading), 0 for the "
      "others; every model the server was asked to load, failed ones included (version \"\" when "
      "the whole model failed: its config); the reason is in the repository index",
      MetricType::Gauge);
  for (const ModelStateSample& sample : samples) {
    for (const auto& [name, label] : kStates) {
      AddGauge(state, {{"model", sample.model}, {"version", sample.version}, {"state", label}},
               sample.state == name ? 1.0 : 0.0);
    }
  }
  families.push_back(std::move(state));
}

// Each loaded model version's facts of how it serves, as labels of a constant 1 (the Prometheus
// info idiom: `* on(model, version) group_left(precision) sluice_model_info` carries them onto
// any per-model series). Read from the engine's stats like the other per-model families, so that
// a version's series goes with its unload and a reload's value replaces it.
void AppendModelInfoFamily(const MetricsInput& input, std::vector<MetricFamily>& families) {
  MetricFamily info = Family(
      "sluice_model_info",
      "1 for each loaded model version; label precision: the CPU precision serving it (fp32, "
      "bf16, int8: the config's `precision` as its load resolved it, auto's choice and "
      "fallbacks taken; GPU instances compute in their compute_type on weights of that "
      "precision), only on models that have one (the CPU encoder)",
      MetricType::Gauge);
  for (const engine::Engine::VersionStats& entry : input.models) {
    Labels labels = ModelLabels(entry);
    // Only the keys named here become labels: a label set that a backend's new resolved
    // parameter cannot change (nor make invalid) behind dashboards' backs.
    const auto precision = entry.resolved_parameters.find("precision");
    if (precision != entry.resolved_parameters.end()) {
      labels.push_back({"precision", precision->second});
    }
    AddGauge(info, std::move(labels), 1.0);
  }
  families.push_back(std::move(info));
}

// The shared-memory registry: regions by kind, bytes mapped, regions draining.
void AppendSharedMemoryFamilies(const SharedMemorySample& shm,
                                std::vector<MetricFamily>& families) {
  MetricFamily regions = Family(
      "sluice_shared_memory_regions",
      "Shared-memory regions clients have registered (Triton's system and CUDA shared-memory "
      "extensions), by kind; bounded by --shared-memory-max-regions",
      MetricType::Gauge);
  AddGauge(regions, {{"kind", "system"}}, static_cast<double>(shm.system_regions));
  AddGauge(regions, {{"kind", "cuda"}}, static_cast<double>(shm.cuda_regions));
  families.push_back(std::move(regions));
  MetricFamily mapped = Family(
      "sluice_shared_memory_mapped_bytes",
      "Bytes of client shared memory mapped into the server (registered regions, unregistered "
      "ones still used by a request, writable mappings of output regions); bounded by "
      "--shared-memory-max-bytes",
      MetricType::Gauge);
  AddGauge(mapped, {}, static_cast<double>(shm.mapped_bytes));
  families.push_back(std::move(mapped));
  MetricFamily draining =
      Family("sluice_shared_memory_draining_regions",
             "Unregistered shared-memory regions still mapped because a request in flight "
             "uses them",
             MetricType::Gauge);
  AddGauge(draining, {}, static_cast<double>(shm.draining_regions));
  families.push_back(std::move(draining));
}

// Prometheus's standard process_* families, and the allocator's heap where it can be read.
void AppendProcessFamilies(const ProcessSample& p, std::vector<MetricFamily>& families) {
  auto gauge = [&](std::string name, std::string help, double value, Labels labels = {}) {
    MetricFamily family = Family(std::move(name), std::move(help), MetricType::Gauge);
    AddGauge(family, std::move(labels), value);
    families.push_back(std::move(family));
  };
  MetricFamily cpu = Family("process_cpu_seconds_total",
                            "Total user and system CPU time spent in seconds", MetricType::Counter);
  AddCounter(cpu, {}, p.cpu_seconds);
  families.push_back(std::move(cpu));
  gauge("process_resident_memory_bytes", "Resident memory size in bytes", p.resident_memory_bytes);
  gauge("process_virtual_memory_bytes", "Virtual memory size in bytes", p.virtual_memory_bytes);
  gauge("process_open_fds", "Number of open file descriptors", p.open_fds);
  gauge("process_max_fds", "Maximum number of open file descriptors", p.max_fds);
  gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds",
        p.start_time_seconds);
  if (p.heap.has_value()) {
    const Labels allocator = {{"allocator", p.heap->allocator}};
    gauge("sluice_heap_allocated_bytes",
          "Bytes the memory allocator has handed out and not had back (the live heap): the "
          "figure to watch for leaks, where RSS also counts what the allocator keeps cached for "
          "reuse",
          p.heap->allocated_bytes, allocator);
    gauge("sluice_heap_size_bytes",
          "Bytes the memory allocator holds from the operating system: the live heap plus its "
          "free lists and caches",
          p.heap->heap_bytes, allocator);
  }
}

// GPU memory and utilization, per GPU, from NVML.
void AppendGpuFamilies(const std::vector<GpuSample>& gpus, std::vector<MetricFamily>& families) {
  MetricFamily used =
      Family("sluice_gpu_memory_used_bytes", "GPU memory in use, from NVML", MetricType::Gauge);
  MetricFamily total =
      Family("sluice_gpu_memory_total_bytes", "GPU memory in total, from NVML", MetricType::Gauge);
  MetricFamily utilization =
      Family("sluice_gpu_utilization_ratio",
             "Fraction of the last sample period (NVML) in which a kernel ran on the GPU",
             MetricType::Gauge);
  for (const GpuSample& gpu : gpus) {
    const Labels labels = {{"gpu", absl::StrCat(gpu.index)}, {"gpu_uuid", gpu.uuid}};
    AddGauge(used, labels, static_cast<double>(gpu.memory_used_bytes));
    AddGauge(total, labels, static_cast<double>(gpu.memory_total_bytes));
    AddGauge(utilization, labels, gpu.utilization_ratio);
  }
  families.push_back(std::move(used));
  families.push_back(std::move(total));
  families.push_back(std::move(utilization));
}

}  // namespace

// One group of families after another; the order of the exposition, kept as it was.
std::vector<MetricFamily> BuildMetricFamilies(const MetricsInput& input) {
  std::vector<MetricFamily> families;
  AppendRequestFamilies(input, families);
  AppendBatchFamilies(input, families);
  AppendLatencyFamilies(input, families);
  AppendDeviceFamilies(input, families);
  AppendServerFamilies(input, families);
  AppendModelInfoFamily(input, families);
  if (input.model_states.has_value()) AppendModelStateFamily(*input.model_states, families);
  if (input.shared_memory.has_value()) AppendSharedMemoryFamilies(*input.shared_memory, families);
  if (input.process.has_value()) AppendProcessFamilies(*input.process, families);
  if (input.gpus.has_value()) AppendGpuFamilies(*input.gpus, families);
  return families;
}

std::string SerializeText(const std::vector<MetricFamily>& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

// The one Collectable the Exposer serves: builds the families at scrape time.
class MetricsExporter::EngineCollectable final : public prometheus::Collectable {
 public:
  EngineCollectable(const engine::Engine& engine, const common::Logger* logger,
                    GpuMetricsSource* gpu_source, const std::atomic<int64_t>* active_infer_calls,
                    const std::atomic<int64_t>* active_http_infer_requests,
                    std::function<SharedMemorySample()> shared_memory,
                    std::function<std::vector<ModelStateSample>()> model_states)
      : engine_(engine),
        logger_(logger),
        gpu_source_(gpu_source),
        active_infer_calls_(active_infer_calls),
        active_http_infer_requests_(active_http_infer_requests),
        shared_memory_(std::move(shared_memory)),
        model_states_(std::move(model_states)) {}

  std::vector<MetricFamily> Collect() const override {
    MetricsInput input;
    if (auto stats = engine_.GetStats("", -1); stats.ok()) input.models = *std::move(stats);
    if (logger_ != nullptr) input.log_dropped = logger_->dropped();
    if (auto process = ReadProcessSample(); process.ok()) input.process = *process;
    if (gpu_source_ != nullptr) input.gpus = gpu_source_->Sample();
    if (active_infer_calls_ != nullptr) input.active_infer_calls = active_infer_calls_->load();
    if (active_http_infer_requests_ != nullptr) {
      input.active_http_infer_requests = active_http_infer_requests_->load();
    }
    if (shared_memory_) input.shared_memory = shared_memory_();
    if (model_states_) input.model_states = model_states_();
    return BuildMetricFamilies(input);
  }

 private:
  const engine::Engine& engine_;
  const common::Logger* const logger_;
  GpuMetricsSource* const gpu_source_;
  const std::atomic<int64_t>* const active_infer_calls_;
  const std::atomic<int64_t>* const active_http_infer_requests_;
  const std::function<SharedMemorySample()> shared_memory_;
  const std::function<std::vector<ModelStateSample>()> model_states_;
};

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(
    const engine::Engine& engine, const common::Logger* logger, MetricsExporterOptions options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port ", options.port, " is outside 0..65535"));
  }
  if (options.request_timeout_ms < 1) {
    return absl::InvalidArgumentError("metrics request timeout must be at least 1 ms");
  }
  if (options.http_threads < 1) {
    return absl::InvalidArgumentError("metrics exporter needs at least one HTTP thread");
  }
  // civetweb's syntax: "127.0.0.1:8002", "[::]:8002".
  const bool ipv6 =
      options.address.find(':') != std::string::npos && options.address.front() != '[';
  const std::string listen = ipv6 ? absl::StrCat("[", options.address, "]:", options.port)
                                  : absl::StrCat(options.address, ":", options.port);
  auto collectable = std::make_shared<EngineCollectable>(
      engine, logger, options.gpu_source, options.active_infer_calls,
      options.active_http_infer_requests, options.shared_memory, options.model_states);
  std::unique_ptr<prometheus::Exposer> exposer;
  // prometheus-cpp reports a failed bind by throwing (civetweb's CivetException); this is the
  // one place our code meets it, and it becomes a Status.
  try {
    exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", listen, "num_threads", absl::StrCat(options.http_threads),
        "request_timeout_ms", absl::StrCat(options.request_timeout_ms)});
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", listen, ": ", e.what(),
                                               " (port in use, or a bad --metrics-address?)"));
  }
  const std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.empty() || ports.front() <= 0) {
    return absl::UnavailableError(absl::StrCat("metrics server on ", listen, " bound no port"));
  }
  exposer->RegisterCollectable(collectable, "/metrics");
  std::string wake_address = options.address;
  if (wake_address == "0.0.0.0" || wake_address.empty()) wake_address = "127.0.0.1";
  if (wake_address == "::" || wake_address == "[::]") wake_address = "::1";
  if (wake_address.size() > 2 && wake_address.front() == '[') {
    wake_address = wake_address.substr(1, wake_address.size() - 2);
  }
  return std::unique_ptr<MetricsExporter>(new MetricsExporter(
      std::move(collectable), std::move(exposer), std::move(wake_address), ports.front()));
}

MetricsExporter::MetricsExporter(std::shared_ptr<EngineCollectable> collectable,
                                 std::unique_ptr<prometheus::Exposer> exposer,
                                 std::string wake_address, int port)
    : collectable_(std::move(collectable)),
      exposer_(std::move(exposer)),
      wake_address_(std::move(wake_address)),
      port_(port) {}

MetricsExporter::~MetricsExporter() {
  // civetweb's listener thread sees its stop flag only when poll() on the listening socket
  // returns, which without traffic takes up to its 2 s timeout; connecting to the socket while
  // the Exposer stops makes shutdown take milliseconds instead.
  std::atomic<bool> stopped{false};
  std::thread waker([&] {
    while (!stopped.load()) {
      Poke(wake_address_, port_);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  exposer_.reset();
  stopped = true;
  waker.join();
}

std::vector<MetricFamily> MetricsExporter::Collect() const { return collectable_->Collect(); }

}  // namespace sluice::server
