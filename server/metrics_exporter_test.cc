#include "server/metrics_exporter.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "engine/core/model_stats.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/nvml_gpu_source.h"
#include "tests/support/http_get.h"

namespace sluice::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// One version of "simple" with known counts.
engine::Engine::VersionStats SampleStats() {
  engine::ModelStats stats;
  const std::vector<engine::RequestTiming> requests = {
      {"a", 1, std::chrono::microseconds(30), std::chrono::milliseconds(2)},
      {"b", 2, std::chrono::microseconds(700), std::chrono::milliseconds(20)},
  };
  stats.RecordBatch({.items = 3,
                     .input = std::chrono::microseconds(10),
                     .infer = std::chrono::microseconds(400),
                     .output = std::chrono::microseconds(20),
                     .requests = requests});
  engine::InferenceRequest failed("simple", 1, [](absl::StatusOr<engine::InferenceResponse>) {});
  failed.received_time = std::chrono::steady_clock::now();
  stats.RecordFailure(failed, absl::StatusCode::kResourceExhausted);
  stats.RecordFailure(failed, absl::StatusCode::kResourceExhausted);
  stats.RecordFailure(failed, absl::StatusCode::kDeadlineExceeded);
  failed.Complete(absl::CancelledError("test"));
  const auto t0 = std::chrono::steady_clock::now();
  stats.RecordDeviceItems(10, t0);
  stats.RecordDeviceItems(13, t0 + std::chrono::milliseconds(100));
  engine::Engine::VersionStats entry{"simple", 1, stats.Snapshot()};
  entry.stats.queue_depth = 4;
  return entry;
}

TEST(MetricsExporterTest, MapsTheSnapshotToFamilies) {
  MetricsInput input;
  input.models.push_back(SampleStats());
  input.log_dropped = 7;
  const std::string text = SerializeText(BuildMetricFamilies(input));
  const std::string m = R"(model="simple",version="1")";
  // Requests by outcome, and every failure reason (zeros included).
  EXPECT_THAT(text, HasSubstr("# TYPE sluice_inference_requests_total counter\n"));
  EXPECT_THAT(text, HasSubstr("sluice_inference_requests_total{" + m + R"(,outcome="success"} 2)"));
  EXPECT_THAT(text, HasSubstr("sluice_inference_requests_total{" + m +
                              R"(,outcome="failure",reason="queue_full"} 2)"));
  EXPECT_THAT(text, HasSubstr("sluice_inference_requests_total{" + m +
                              R"(,outcome="failure",reason="deadline_exceeded"} 1)"));
  for (const char* reason : {"invalid_argument", "unavailable", "internal", "other"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("sluice_inference_requests_total{", m,
                                             R"(,outcome="failure",reason=")", reason, R"("} 0)")));
  }
  EXPECT_THAT(text, HasSubstr("sluice_inference_items_total{" + m + "} 3\n"));
  EXPECT_THAT(text, HasSubstr("sluice_batches_total{" + m + "} 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE sluice_queue_depth gauge\n"));
  EXPECT_THAT(text, HasSubstr("sluice_queue_depth{" + m + "} 4\n"));
  // Histograms: cumulative buckets ending at +Inf, count and sum.
  EXPECT_THAT(text, HasSubstr("# TYPE sluice_batch_size histogram\n"));
  EXPECT_THAT(text, HasSubstr("sluice_batch_size_bucket{" + m + R"(,le="2"} 0)"));
  EXPECT_THAT(text, HasSubstr("sluice_batch_size_bucket{" + m + R"(,le="4"} 1)"));
  EXPECT_THAT(text, HasSubstr("sluice_batch_size_bucket{" + m + R"(,le="+Inf"} 1)"));
  EXPECT_THAT(text, HasSubstr("sluice_batch_size_sum{" + m + "} 3\n"));
  EXPECT_THAT(text, HasSubstr("sluice_request_duration_seconds_count{" + m + "} 2\n"));
  EXPECT_THAT(text, HasSubstr("sluice_request_duration_seconds_bucket{" + m + R"(,le="0.001"} 0)"));
  EXPECT_THAT(text,
              HasSubstr("sluice_request_duration_seconds_bucket{" + m + R"(,le="0.0025"} 1)"));
  EXPECT_THAT(text, HasSubstr("sluice_request_duration_seconds_bucket{" + m + R"(,le="0.025"} 2)"));
  EXPECT_THAT(text, HasSubstr("sluice_request_duration_seconds_bucket{" + m + R"(,le="+Inf"} 2)"));
  EXPECT_THAT(text, HasSubstr("sluice_request_duration_seconds_sum{" + m + "} 0.022"));
  EXPECT_THAT(text, HasSubstr("sluice_queue_duration_seconds_bucket{" + m + R"(,le="0.0001"} 1)"));
  for (const char* phase : {"input", "infer", "output"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("sluice_compute_duration_seconds_count{", m,
                                             R"(,phase=")", phase, R"("} 1)")));
  }
  EXPECT_THAT(text, HasSubstr("sluice_compute_duration_seconds_bucket{" + m +
                              R"(,phase="infer",le="0.0005"} 1)"));
  // Collector readings.
  EXPECT_THAT(text, HasSubstr("sluice_device_items_total{" + m + "} 13\n"));
  EXPECT_THAT(text, HasSubstr("sluice_throughput_items_per_second{" + m + "} 30\n"));
  EXPECT_THAT(text, HasSubstr("sluice_log_dropped_total 7\n"));
  // Nothing made up: no process or GPU readings were given.
  EXPECT_THAT(text, Not(HasSubstr("process_")));
  EXPECT_THAT(text, Not(HasSubstr("sluice_gpu_")));
}

TEST(MetricsExporterTest, TokenizePhaseOnlyForModelsThatTokenized) {
  engine::ModelStats text(engine::ModelStatsOptions{.counts_tokens = true});
  text.RecordPreparation({.items = 1, .total = std::chrono::microseconds(80)});
  text.RecordPreparation({.items = 1, .total = std::chrono::microseconds(700)});
  MetricsInput input;
  input.models.push_back({"encoder", 1, text.Snapshot()});
  input.models.push_back(SampleStats());  // "simple": never tokenizes
  const std::string out = SerializeText(BuildMetricFamilies(input));
  const std::string m = R"(model="encoder",version="1")";
  EXPECT_THAT(out, HasSubstr("# TYPE sluice_tokenize_duration_seconds histogram\n"));
  EXPECT_THAT(out,
              HasSubstr("sluice_tokenize_duration_seconds_bucket{" + m + R"(,le="0.0001"} 1)"));
  EXPECT_THAT(out, HasSubstr("sluice_tokenize_duration_seconds_bucket{" + m + R"(,le="0.001"} 2)"));
  EXPECT_THAT(out, HasSubstr("sluice_tokenize_duration_seconds_count{" + m + "} 2\n"));
  EXPECT_THAT(out, Not(HasSubstr(R"(sluice_tokenize_duration_seconds_count{model="simple")")));
}

TEST(MetricsExporterTest, TokensPerBatchOnlyForRaggedModels) {
  engine::ModelStats ragged(engine::ModelStatsOptions{.counts_tokens = true});
  ragged.RecordBatchTokens(20);
  ragged.RecordBatchTokens(300);
  MetricsInput input;
  input.models.push_back({"encoder", 1, ragged.Snapshot()});
  input.models.push_back(SampleStats());  // "simple": no ragged batching
  const std::string text = SerializeText(BuildMetricFamilies(input));
  const std::string m = R"(model="encoder",version="1")";
  EXPECT_THAT(text, HasSubstr("# TYPE sluice_batch_tokens histogram\n"));
  EXPECT_THAT(text, HasSubstr("sluice_batch_tokens_bucket{" + m + R"(,le="16"} 0)"));
  EXPECT_THAT(text, HasSubstr("sluice_batch_tokens_bucket{" + m + R"(,le="32"} 1)"));
  EXPECT_THAT(text, HasSubstr("sluice_batch_tokens_bucket{" + m + R"(,le="256"} 1)"));
  EXPECT_THAT(text, HasSubstr("sluice_batch_tokens_bucket{" + m + R"(,le="512"} 2)"));
  EXPECT_THAT(text, HasSubstr("sluice_batch_tokens_count{" + m + "} 2\n"));
  EXPECT_THAT(text, HasSubstr("sluice_batch_tokens_sum{" + m + "} 320\n"));
  EXPECT_THAT(text, Not(HasSubstr(R"(sluice_batch_tokens_count{model="simple")")));
}

TEST(MetricsExporterTest, NoModelsStillExportsEveryFamily) {
  const auto families = BuildMetricFamilies(MetricsInput{});
  std::set<std::string> names;
  for (const auto& family : families) names.insert(family.name);
  for (const char* name : {"sluice_inference_requests_total", "sluice_inference_items_total",
                           "sluice_batches_total", "sluice_batch_size", "sluice_queue_depth",
                           "sluice_request_duration_seconds", "sluice_queue_duration_seconds",
                           "sluice_compute_duration_seconds", "sluice_device_items_total",
                           "sluice_throughput_items_per_second", "sluice_log_dropped_total"}) {
    EXPECT_EQ(names.count(name), 1u) << name;
  }
}

TEST(MetricsExporterTest, ActiveInferCallsGaugeOnlyWithItsSource) {
  EXPECT_THAT(SerializeText(BuildMetricFamilies(MetricsInput{})),
              Not(HasSubstr("sluice_grpc_infer_calls_active")));
  MetricsInput input;
  input.active_infer_calls = 7;
  const std::string text = SerializeText(BuildMetricFamilies(input));
  EXPECT_THAT(text, HasSubstr("# TYPE sluice_grpc_infer_calls_active gauge\n"));
  EXPECT_THAT(text, HasSubstr("sluice_grpc_infer_calls_active 7\n"));
  EXPECT_THAT(text, Not(HasSubstr("sluice_http_infer_requests_active")));
}

TEST(MetricsExporterTest, HttpTwinOfTheActiveCallsGauge) {
  MetricsInput input;
  input.active_infer_calls = 2;
  input.active_http_infer_requests = 5;
  const std::string text = SerializeText(BuildMetricFamilies(input));
  EXPECT_THAT(text, HasSubstr("sluice_grpc_infer_calls_active 2\n"));  // the name kept, unlabelled
  EXPECT_THAT(text, HasSubstr("# TYPE sluice_http_infer_requests_active gauge\n"));
  EXPECT_THAT(text, HasSubstr("sluice_http_infer_requests_active 5\n"));
}

TEST(MetricsExporterTest, SharedMemoryGaugesOnlyWithTheirSource) {
  EXPECT_THAT(SerializeText(BuildMetricFamilies(MetricsInput{})),
              Not(HasSubstr("sluice_shared_memory")));
  MetricsInput input;
  input.shared_memory = SharedMemorySample{
      .system_regions = 3, .cuda_regions = 1, .mapped_bytes = 12288, .draining_regions = 2};
  const std::string text = SerializeText(BuildMetricFamilies(input));
  EXPECT_THAT(text, HasSubstr("# TYPE sluice_shared_memory_regions gauge\n"));
  EXPECT_THAT(text, HasSubstr("sluice_shared_memory_regions{kind=\"system\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("sluice_shared_memory_regions{kind=\"cuda\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("sluice_shared_memory_mapped_bytes 12288\n"));
  EXPECT_THAT(text, HasSubstr("sluice_shared_memory_draining_regions 2\n"));
}

// With the NVIDIA driver's NVML: a reading per GPU with its memory; without it (as on the CPU
// machines CI runs on): a reason that names the library, and so no sluice_gpu_* families.
// Issue 34: failed models were absent from /metrics, so no alert could fire. Each model version
// asked to load has a one-hot state gauge; a whole-model failure has an empty version.
TEST(MetricsExporterTest, ModelStateGaugeIsOneHotAndOnlyWithItsSource) {
  MetricsInput input;
  EXPECT_THAT(SerializeText(BuildMetricFamilies(input)), Not(HasSubstr("sluice_model_state")));
  input.model_states = std::vector<ModelStateSample>{
      {.model = "good", .version = "1", .state = "READY"},
      {.model = "broken", .version = "", .state = "UNAVAILABLE"},
      {.model = "big", .version = "", .state = "LOADING"},
      {.model = "old", .version = "3", .state = "UNLOADING"},
  };
  const std::string text = SerializeText(BuildMetricFamilies(input));
  EXPECT_THAT(text, HasSubstr("# TYPE sluice_model_state gauge\n"));
  auto series = [](const std::string& model, const std::string& version, const std::string& state) {
    return absl::StrCat("sluice_model_state{model=\"", model, "\",version=\"", version,
                        "\",state=\"", state, "\"}");
  };
  const std::set<std::string> states = {"loading", "ready", "unavailable", "unloading"};
  const std::vector<std::tuple<std::string, std::string, std::string>> expected = {
      {"good", "1", "ready"},
      {"broken", "", "unavailable"},
      {"big", "", "loading"},
      {"old", "3", "unloading"}};
  for (const auto& [model, version, in_state] : expected) {
    for (const std::string& state : states) {
      EXPECT_THAT(text,
                  HasSubstr(series(model, version, state) + (state == in_state ? " 1\n" : " 0\n")))
          << model << " " << state;
    }
  }
}

// Issue 36: which precision serves each model is a metric label. Every loaded version has one
// info series; the label is there only where the load resolved a precision (the CPU encoder).
TEST(MetricsExporterTest, ModelInfoLabelsEachLoadedVersionWithItsServedPrecision) {
  MetricsInput input;
  input.models.push_back(SampleStats());
  engine::Engine::VersionStats encoder{"minilm", 2, {}};
  encoder.resolved_parameters = {{"precision", "int8"}, {"not_a_label", "x"}};
  input.models.push_back(encoder);
  const std::string text = SerializeText(BuildMetricFamilies(input));
  EXPECT_THAT(text, HasSubstr("# TYPE sluice_model_info gauge\n"));
  EXPECT_THAT(text, HasSubstr("sluice_model_info{model=\"minilm\",version=\"2\",precision="
                              "\"int8\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("sluice_model_info{model=\"simple\",version=\"1\"} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr("not_a_label")));
  // Unloaded (absent from the engine's stats): its series goes.
  input.models.pop_back();
  EXPECT_THAT(SerializeText(BuildMetricFamilies(input)), Not(HasSubstr("minilm")));
}

TEST(NvmlGpuSourceTest, ReadsEveryGpuOrSaysWhyNot) {
  absl::StatusOr<std::unique_ptr<NvmlGpuSource>> source = NvmlGpuSource::Open();
  if (!source.ok()) {
    EXPECT_EQ(source.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(std::string(source.status().message()),
                ::testing::AnyOf(HasSubstr("libnvidia-ml.so.1"), HasSubstr("NVML")));
    return;
  }
  const std::vector<GpuSample> samples = (*source)->Sample();
  ASSERT_EQ(static_cast<int>(samples.size()), (*source)->device_count());
  for (const GpuSample& gpu : samples) {
    EXPECT_GT(gpu.memory_total_bytes, 0u);
    EXPECT_LE(gpu.memory_used_bytes, gpu.memory_total_bytes);
    EXPECT_GE(gpu.utilization_ratio, 0.0);
    EXPECT_LE(gpu.utilization_ratio, 1.0);
    EXPECT_FALSE(gpu.uuid.empty());
  }
}

TEST(MetricsExporterTest, MapsProcessAndGpuReadings) {
  MetricsInput input;
  input.process = ProcessSample{
      .resident_memory_bytes = 1048576,
      .virtual_memory_bytes = 4194304,
      .cpu_seconds = 1.5,
      .open_fds = 12,
      .max_fds = 1024,
      .start_time_seconds = 1700000000,
      .heap = HeapSample{.allocator = "tcmalloc", .allocated_bytes = 3072, .heap_bytes = 65536}};
  input.gpus = std::vector<GpuSample>{{.index = 0,
                                       .uuid = "GPU-abc",
                                       .memory_used_bytes = 2048,
                                       .memory_total_bytes = 8192,
                                       .utilization_ratio = 0.25}};
  const std::string text = SerializeText(BuildMetricFamilies(input));
  EXPECT_THAT(text, HasSubstr("process_resident_memory_bytes 1048576\n"));
  EXPECT_THAT(text, HasSubstr("process_virtual_memory_bytes 4194304\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_cpu_seconds_total counter\n"));
  EXPECT_THAT(text, HasSubstr("process_cpu_seconds_total 1.5\n"));
  EXPECT_THAT(text, HasSubstr("process_open_fds 12\n"));
  EXPECT_THAT(text, HasSubstr("process_max_fds 1024\n"));
  EXPECT_THAT(text, HasSubstr("process_start_time_seconds 1700000000\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE sluice_heap_allocated_bytes gauge\n"));
  EXPECT_THAT(text, HasSubstr(R"(sluice_heap_allocated_bytes{allocator="tcmalloc"} 3072)"));
  EXPECT_THAT(text, HasSubstr(R"(sluice_heap_size_bytes{allocator="tcmalloc"} 65536)"));
  EXPECT_THAT(text, HasSubstr(R"(sluice_gpu_memory_used_bytes{gpu="0",gpu_uuid="GPU-abc"} 2048)"));
  EXPECT_THAT(text, HasSubstr(R"(sluice_gpu_memory_total_bytes{gpu="0",gpu_uuid="GPU-abc"} 8192)"));
  EXPECT_THAT(text, HasSubstr(R"(sluice_gpu_utilization_ratio{gpu="0",gpu_uuid="GPU-abc"} 0.25)"));
}

TEST(MetricsExporterTest, ReadsThisProcess) {
  absl::StatusOr<ProcessSample> sample = ReadProcessSample();
  ASSERT_TRUE(sample.ok()) << sample.status();
  EXPECT_GT(sample->resident_memory_bytes, 1e5);
  EXPECT_GE(sample->virtual_memory_bytes, sample->resident_memory_bytes);
  EXPECT_GE(sample->cpu_seconds, 0.0);
  EXPECT_GE(sample->open_fds, 3.0);  // stdin, stdout, stderr at least
  EXPECT_GE(sample->max_fds, sample->open_fds);
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(sample->start_time_seconds, now + 2);
  EXPECT_GT(sample->start_time_seconds, now - 3600);
}

// The live heap follows an allocation and its free. This test binary runs on glibc malloc (only
// the servers link tcmalloc; the server's /metrics is checked with it by scripts/soak.sh); a 64 MiB
// block is mmap()ed by glibc on its own, so it shows in full.
TEST(MetricsExporterTest, HeapSampleFollowsAnAllocationAndItsFree) {
#if defined(SLUICE_SANITIZER_BUILD)
  GTEST_SKIP() << "the sanitizers' allocator replaces malloc; glibc's account does not see it";
#else
  const std::optional<HeapSample> before = ReadHeapSample();
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->allocator, "glibc");
  EXPECT_GE(before->heap_bytes, before->allocated_bytes);
  constexpr size_t kBlock = size_t{64} << 20;
  // A volatile pointer: the compiler may not elide the allocation.
  void* volatile block = std::malloc(kBlock);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBlock);
  const std::optional<HeapSample> during = ReadHeapSample();
  ASSERT_TRUE(during.has_value());
  EXPECT_GE(during->allocated_bytes - before->allocated_bytes, static_cast<double>(kBlock));
  EXPECT_GE(during->heap_bytes, during->allocated_bytes);
  std::free(block);
  const std::optional<HeapSample> after = ReadHeapSample();
  ASSERT_TRUE(after.has_value());
  EXPECT_LE(after->allocated_bytes, during->allocated_bytes - static_cast<double>(kBlock));
#endif
}

// A fake NVML: the hook's contract is only "return the readings".
class FakeGpuSource final : public GpuMetricsSource {
 public:
  std::vector<GpuSample> Sample() override {
    return {{.index = 1, .uuid = "GPU-fake", .memory_used_bytes = 5}};
  }
};

TEST(MetricsExporterTest, ServesMetricsOverHttpOnAPickedPort) {
  common::Logger logger({.min_level = common::LogLevel::kError});
  auto engine = engine::Engine::Create({});
  ASSERT_TRUE(engine.ok());
  FakeGpuSource gpus;
  auto exporter = MetricsExporter::Start(**engine, &logger,
                                         {.address = "127.0.0.1", .port = 0, .gpu_source = &gpus});
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  ASSERT_GT((*exporter)->port(), 0);
  const std::string body = testing::HttpGet((*exporter)->port(), "/metrics").body;
  EXPECT_THAT(body, HasSubstr("# TYPE sluice_log_dropped_total counter\n"));
  EXPECT_THAT(body, HasSubstr("sluice_log_dropped_total 0\n"));
  EXPECT_THAT(body, HasSubstr("process_resident_memory_bytes "));
  EXPECT_THAT(body, HasSubstr(R"(sluice_gpu_memory_used_bytes{gpu="1",gpu_uuid="GPU-fake"} 5)"));

  // The same port again: a Status naming the address, not an exception.
  auto second = MetricsExporter::Start(**engine, &logger,
                                       {.address = "127.0.0.1", .port = (*exporter)->port()});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr(absl::StrCat("127.0.0.1:", (*exporter)->port())));
  EXPECT_FALSE(MetricsExporter::Start(**engine, &logger, {.port = 70000}).ok());
}

}  // namespace
}  // namespace sluice::server
