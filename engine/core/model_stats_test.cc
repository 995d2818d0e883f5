#include "engine/core/model_stats.h"

#include <cstdio>
#include <string>
#include <vector>

#include "common/log.h"
#include "engine/core/inference_request.h"
#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

std::string ReadAll(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  return out;
}

size_t CountOccurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) {
    ++n;
  }
  return n;
}

TEST(FixedHistogramTest, BoundsAreInclusiveUpperBounds) {
  DurationHistogram h;
  h.Observe(kDurationBucketBoundsSeconds, 0.0);       // bucket 0 (<= 50 us)
  h.Observe(kDurationBucketBoundsSeconds, 0.00005);   // exactly on the first bound: bucket 0
  h.Observe(kDurationBucketBoundsSeconds, 0.000051);  // just above: bucket 1 (<= 100 us)
  h.Observe(kDurationBucketBoundsSeconds, 0.003);     // <= 5 ms: bucket 6
  h.Observe(kDurationBucketBoundsSeconds, 1000.0);    // above every bound: the +Inf bucket
  EXPECT_EQ(h.counts[0], 2u);
  EXPECT_EQ(h.counts[1], 1u);
  EXPECT_EQ(h.counts[6], 1u);
  EXPECT_EQ(h.counts[kDurationBucketBoundsSeconds.size()], 1u);
  EXPECT_EQ(h.count, 5u);
  EXPECT_DOUBLE_EQ(h.sum, 0.00005 + 0.000051 + 0.003 + 1000.0);
  uint64_t total = 0;
  for (uint64_t c : h.counts) total += c;
  EXPECT_EQ(total, h.count);
}

TEST(FixedHistogramTest, WeightedObservation) {
  BatchSizeHistogram h;
  h.Observe(kBatchSizeBucketBounds, 3, /*n=*/4);  // 3 items: bucket "<= 4"
  EXPECT_EQ(h.counts[2], 4u);
  EXPECT_EQ(h.count, 4u);
  EXPECT_DOUBLE_EQ(h.sum, 12.0);
}

TEST(ModelStatsTest, RecordBatchFillsCountersAndHistograms) {
  ModelStats stats;
  const std::vector<RequestTiming> requests = {
      {"a", 1, microseconds(30), milliseconds(2)},
      {"b", 3, microseconds(700), milliseconds(20)},
  };
  stats.RecordBatch({.items = 4,
                     .input = microseconds(10),
                     .infer = microseconds(400),
                     .output = microseconds(20),
                     .requests = requests});
  const ModelStatsSnapshot s = stats.Snapshot();
  // What ModelStatistics reports (unchanged semantics).
  EXPECT_EQ(s.inference_count, 4u);
  EXPECT_EQ(s.execution_count, 1u);
  EXPECT_EQ(s.success.count, 2u);
  EXPECT_EQ(s.success.ns, 22'000'000u);
  EXPECT_EQ(s.queue.count, 2u);
  EXPECT_EQ(s.queue.ns, 730'000u);
  EXPECT_EQ(s.compute_infer.count, 2u);  // per request, as Triton
  EXPECT_EQ(s.compute_infer.ns, 800'000u);
  ASSERT_EQ(s.batch_stats.count(4), 1u);
  EXPECT_EQ(s.batch_stats.at(4).compute_infer.count, 1u);
  EXPECT_GT(s.last_inference_ms, 0u);
  // Histograms: requests per request, compute and batch size per batch.
  EXPECT_EQ(s.request_duration.count, 2u);
  EXPECT_EQ(s.request_duration.counts[5], 1u);  // 2 ms: <= 2.5 ms
  EXPECT_EQ(s.request_duration.counts[8], 1u);  // 20 ms: <= 25 ms
  EXPECT_NEAR(s.request_duration.sum, 0.022, 1e-12);
  EXPECT_EQ(s.queue_duration.counts[0], 1u);  // 30 us
  EXPECT_EQ(s.queue_duration.counts[4], 1u);  // 700 us: <= 1 ms
  EXPECT_EQ(s.compute_infer_duration.count, 1u);
  EXPECT_EQ(s.compute_infer_duration.counts[3], 1u);  // 400 us: <= 500 us
  EXPECT_EQ(s.compute_input_duration.count, 1u);
  EXPECT_EQ(s.compute_output_duration.count, 1u);
  EXPECT_EQ(s.batch_size.count, 1u);
  EXPECT_EQ(s.batch_size.counts[2], 1u);  // 4 items: <= 4
  EXPECT_DOUBLE_EQ(s.batch_size.sum, 4.0);
  for (uint64_t failures : s.failures_by_reason) EXPECT_EQ(failures, 0u);
}

TEST(ModelStatsTest, FailuresAreCountedByReason) {
  ModelStats stats;
  InferenceRequest request("m", 1, [](absl::StatusOr<InferenceResponse>) {});
  request.received_time = std::chrono::steady_clock::now();
  stats.RecordFailure(request, absl::StatusCode::kResourceExhausted);
  stats.RecordFailure(request, absl::StatusCode::kResourceExhausted);
  stats.RecordFailure(request, absl::StatusCode::kDeadlineExceeded);
  stats.RecordFailure(request, absl::StatusCode::kInvalidArgument);
  stats.RecordFailure(request, absl::StatusCode::kInternal);
  stats.RecordFailure(request, absl::StatusCode::kUnavailable);
  stats.RecordFailure(request, absl::StatusCode::kDataLoss);
  request.Complete(absl::CancelledError("test"));
  const ModelStatsSnapshot s = stats.Snapshot();
  EXPECT_EQ(s.fail.count, 7u);
  auto count = [&](FailureReason reason) {
    return s.failures_by_reason[static_cast<size_t>(reason)];
  };
  EXPECT_EQ(count(FailureReason::kQueueFull), 2u);
  EXPECT_EQ(count(FailureReason::kDeadlineExceeded), 1u);
  EXPECT_EQ(count(FailureReason::kInvalidArgument), 1u);
  EXPECT_EQ(count(FailureReason::kInternal), 1u);
  EXPECT_EQ(count(FailureReason::kUnavailable), 1u);
  EXPECT_EQ(count(FailureReason::kOther), 1u);
  EXPECT_EQ(s.success.count, 0u);
}

TEST(ModelStatsTest, PreparationStageIsCountedApartFromTheModel) {
  ModelStats stats;
  stats.RecordPreparation({.items = 3,
                           .queue = microseconds(100),
                           .compute = microseconds(400),
                           .total = microseconds(520)});
  stats.RecordPreparation({.items = 1,
                           .queue = microseconds(10),
                           .compute = microseconds(40),
                           .total = microseconds(60)});
  stats.RecordPreparation({.items = 3,
                           .queue = microseconds(0),
                           .compute = microseconds(200),
                           .total = microseconds(210)});
  stats.RecordPreparationFailure(microseconds(30));
  const ModelStatsSnapshot s = stats.Snapshot();
  const PreparationStats& p = s.preparation;
  EXPECT_EQ(p.jobs, 3u);
  EXPECT_EQ(p.items, 7u);
  EXPECT_EQ(p.success.count, 3u);
  EXPECT_EQ(p.success.ns, 790'000u);
  EXPECT_EQ(p.queue.count, 3u);
  EXPECT_EQ(p.queue.ns, 110'000u);
  EXPECT_EQ(p.compute.count, 3u);
  EXPECT_EQ(p.compute.ns, 640'000u);
  EXPECT_EQ(p.fail.count, 1u);
  EXPECT_EQ(p.fail.ns, 30'000u);
  EXPECT_GT(p.last_prepared_ms, 0u);
  ASSERT_EQ(p.compute_by_items.size(), 2u);
  EXPECT_EQ(p.compute_by_items.at(3).count, 2u);
  EXPECT_EQ(p.compute_by_items.at(3).ns, 600'000u);
  EXPECT_EQ(p.compute_by_items.at(1).count, 1u);
  // The Prometheus histogram observes the total of each prepared request.
  EXPECT_EQ(s.tokenize_duration.count, 3u);
  EXPECT_NEAR(s.tokenize_duration.sum, 790e-6, 1e-12);
  // The model's own counters are untouched: the stage reports apart (and a model records its own
  // failures with RecordFailure), and `prepares` is the engine's to fill in.
  EXPECT_EQ(s.success.count, 0u);
  EXPECT_EQ(s.fail.count, 0u);
  EXPECT_EQ(s.inference_count, 0u);
  EXPECT_FALSE(s.prepares);
}

TEST(ModelStatsTest, FailureReasonNames) {
  EXPECT_EQ(FailureReasonName(FailureReason::kQueueFull), "queue_full");
  EXPECT_EQ(FailureReasonName(FailureReason::kDeadlineExceeded), "deadline_exceeded");
  EXPECT_EQ(FailureReasonName(FailureReason::kInvalidArgument), "invalid_argument");
  EXPECT_EQ(FailureReasonName(FailureReason::kUnavailable), "unavailable");
  EXPECT_EQ(FailureReasonName(FailureReason::kInternal), "internal");
  EXPECT_EQ(FailureReasonName(FailureReason::kOther), "other");
  EXPECT_EQ(FailureReasonFromCode(absl::StatusCode::kNotFound), FailureReason::kOther);
}

TEST(ModelStatsTest, ThroughputFromDeviceItemReadings) {
  ModelStats stats;
  const auto t0 = std::chrono::steady_clock::now();
  stats.RecordDeviceItems(100, t0);  // the first reading only sets the baseline
  EXPECT_EQ(stats.Snapshot().device_items, 100u);
  EXPECT_EQ(stats.Snapshot().throughput_items_per_second, 0.0);
  stats.RecordDeviceItems(350, t0 + milliseconds(500));
  EXPECT_EQ(stats.Snapshot().device_items, 350u);
  EXPECT_DOUBLE_EQ(stats.Snapshot().throughput_items_per_second, 500.0);
  stats.RecordDeviceItems(350, t0 + milliseconds(1500));  // idle: the gauge falls to 0
  EXPECT_DOUBLE_EQ(stats.Snapshot().throughput_items_per_second, 0.0);
}

TEST(ModelStatsTest, TokenThroughputFromTheSameReadings) {
  ModelStats stats;
  const auto t0 = std::chrono::steady_clock::now();
  stats.RecordDeviceItems(10, t0, 1000);
  EXPECT_EQ(stats.Snapshot().device_tokens, 1000u);
  EXPECT_EQ(stats.Snapshot().throughput_tokens_per_second, 0.0);
  stats.RecordDeviceItems(20, t0 + milliseconds(250), 3000);
  EXPECT_EQ(stats.Snapshot().device_tokens, 3000u);
  EXPECT_DOUBLE_EQ(stats.Snapshot().throughput_tokens_per_second, 8000.0);
  EXPECT_DOUBLE_EQ(stats.Snapshot().throughput_items_per_second, 40.0);
}

TEST(ModelStatsTest, AccessLogWritesOneRecordPerSampledRequest) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    common::Logger logger({.format = common::LogFormat::kJson, .sink = f});
    ModelStats stats({.model_name = "simple",
                      .model_version = 3,
                      .logger = &logger,
                      .access_log_sample_rate = 1.0});
    const std::vector<RequestTiming> requests = {{"req-1", 2, microseconds(5), microseconds(90)},
                                                 {"req-2", 1, microseconds(7), microseconds(95)}};
    stats.RecordBatch({.items = 3,
                       .input = microseconds(1),
                       .infer = microseconds(40),
                       .output = microseconds(2),
                       .requests = requests});
    InferenceRequest failed("simple", 3, [](absl::StatusOr<InferenceResponse>) {});
    failed.id = "req-3";
    failed.received_time = std::chrono::steady_clock::now();
    stats.RecordFailure(failed, absl::StatusCode::kResourceExhausted);
    failed.Complete(absl::ResourceExhaustedError("test"));
    logger.Flush();
  }
  const std::string text = ReadAll(f);
  EXPECT_EQ(CountOccurrences(text, "\"msg\":\"access\""), 3u) << text;
  // Numbers stay numbers in JSON; the record names model, version, id, batch, times, status.
  EXPECT_NE(text.find(R"("model":"simple","version":3,"id":"req-1","batch":2,"batch_items":3,)"
                      R"("queue_us":5,"compute_us":43,"total_us":90,"status":"OK"})"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"("id":"req-3","batch":1,)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("status":"RESOURCE_EXHAUSTED"})"), std::string::npos) << text;
  std::fclose(f);
}

TEST(ModelStatsTest, AccessLogSamplesAFraction) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  constexpr int kRequests = 4000;
  {
    common::Logger logger({.queue_capacity = kRequests + 10, .sink = f});
    ModelStats stats({.model_name = "m", .logger = &logger, .access_log_sample_rate = 0.25});
    std::vector<RequestTiming> requests(kRequests, RequestTiming{"x", 1, {}, {}});
    stats.RecordBatch({.items = kRequests, .requests = requests});
    logger.Flush();
    EXPECT_EQ(logger.dropped(), 0u);
  }
  const size_t lines = CountOccurrences(ReadAll(f), " I access ");
  // Binomial(4000, 0.25): mean 1000, standard deviation ~27; 8 sigma either side.
  EXPECT_GT(lines, 780u);
  EXPECT_LT(lines, 1220u);
  std::fclose(f);
}

TEST(ModelStatsTest, NoAccessLogAtRateZeroOrBelowInfo) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    common::Logger quiet({.min_level = common::LogLevel::kWarning, .sink = f});
    common::Logger info({.sink = f});
    ModelStats off({.model_name = "m", .logger = &info, .access_log_sample_rate = 0});
    ModelStats filtered({.model_name = "m", .logger = &quiet, .access_log_sample_rate = 1});
    const std::vector<RequestTiming> requests = {{"x", 1, {}, {}}};
    off.RecordBatch({.items = 1, .requests = requests});
    filtered.RecordBatch({.items = 1, .requests = requests});
    info.Flush();
    quiet.Flush();
  }
  EXPECT_EQ(ReadAll(f), "");
  std::fclose(f);
}

}  // namespace
}  // namespace sluice::engine
