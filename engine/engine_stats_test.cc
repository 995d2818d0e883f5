// The engine's observability through its public API: failure reasons, the collector's device
// items and throughput, the access log, and the histograms a real model run fills.

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "tests/support/engine/answer.h"

namespace sluice::engine {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

using ::sluice::engine::testing::AnswerLog;

// An `identity` FP32 model of [2] per item.
ModelSpec IdentitySpec(int max_queue_size = 0, std::optional<microseconds> delay = std::nullopt) {
  ModelConfig config;
  config.name = "id";
  config.backend = "identity";
  config.max_batch_size = 8;
  config.inputs = {{"INPUT0", DataType::kFp32, {2}}};
  config.outputs = {{"OUTPUT0", DataType::kFp32, {2}}};
  if (delay.has_value()) config.dynamic_batching = DynamicBatchingConfig{*delay, {}};
  config.queue_policy.max_queue_size = max_queue_size;
  return ModelSpec{std::move(config), 1, ""};
}

// A request for "id" of `batch` items (of [2] floats), answered into `answers`.
std::unique_ptr<InferenceRequest> Request(const std::shared_ptr<AnswerLog>& answers, int batch = 1,
                                          Shape shape = {}) {
  auto data = std::make_shared<std::vector<std::byte>>(static_cast<size_t>(batch) * 2 * 4);
  auto request = std::make_unique<InferenceRequest>("id", -1, AnswerLog::Into(answers));
  if (shape.empty()) shape = {batch, 2};
  request->inputs.push_back(TensorView{"INPUT0", DataType::kFp32, shape, *data});
  request->keepalive = data;
  request->received_time = std::chrono::steady_clock::now();
  return request;
}

ModelStatsSnapshot StatsOf(const Engine& engine) {
  absl::StatusOr<std::vector<Engine::VersionStats>> stats = engine.GetStats("id", -1);
  EXPECT_TRUE(stats.ok()) << stats.status();
  return stats.ok() && !stats->empty() ? (*stats)[0].stats : ModelStatsSnapshot{};
}

uint64_t Failures(const ModelStatsSnapshot& s, FailureReason reason) {
  return s.failures_by_reason[static_cast<size_t>(reason)];
}

TEST(EngineStatsTest, CreateChecksObservabilityOptions) {
  EXPECT_FALSE(Engine::Create({.access_log_sample_rate = 1.5}).ok());
  EXPECT_FALSE(Engine::Create({.access_log_sample_rate = -0.1}).ok());
  EXPECT_FALSE(Engine::Create({.stats_interval = milliseconds(-1)}).ok());
  EXPECT_TRUE(Engine::Create({.stats_interval = milliseconds(5)}).ok());
}

TEST(EngineStatsTest, FailuresCarryTheirReason) {
  common::FakeClock clock(common::Clock::TimePoint{} + std::chrono::hours(1));
  auto engine = Engine::Create({.clock = &clock});
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->LoadModel(IdentitySpec(/*max_queue_size=*/2, microseconds(100))).ok());
  auto answers = std::make_shared<AnswerLog>();
  // Bad shape: rejected at submit.
  (*engine)->Submit(Request(answers, 1, Shape{1, 3}));
  // Two wait for the batching delay (the fake clock stands still), the third finds the queue full.
  auto expiring = Request(answers);
  expiring->deadline = clock.Now() + microseconds(50);
  (*engine)->Submit(std::move(expiring));
  (*engine)->Submit(Request(answers));
  (*engine)->Submit(Request(answers));
  ASSERT_TRUE(answers->WaitForCount(2));
  clock.Advance(microseconds(100));  // the first expires; the delay passes for the other
  ASSERT_TRUE(answers->WaitForCount(4));

  const ModelStatsSnapshot s = StatsOf(**engine);
  EXPECT_EQ(Failures(s, FailureReason::kInvalidArgument), 1u);
  EXPECT_EQ(Failures(s, FailureReason::kQueueFull), 1u);
  EXPECT_EQ(Failures(s, FailureReason::kDeadlineExceeded), 1u);
  EXPECT_EQ(s.fail.count, 3u);
  EXPECT_EQ(s.success.count, 1u);
  EXPECT_EQ(s.request_duration.count, 1u);
  EXPECT_EQ(s.batch_size.count, 1u);
}

TEST(EngineStatsTest, CollectorPublishesDeviceItemsAndThroughput) {
  auto engine = Engine::Create({.stats_interval = milliseconds(5)});
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->LoadModel(IdentitySpec()).ok());
  auto answers = std::make_shared<AnswerLog>();
  // Load runs (spread over several collector intervals) until the gauge has shown it.
  double max_throughput = 0;
  int sent = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((sent < 300 || max_throughput == 0) && std::chrono::steady_clock::now() < give_up) {
    (*engine)->Submit(Request(answers, 1 + sent % 3));
    ++sent;
    if (sent % 10 == 0) {
      max_throughput = std::max(max_throughput, StatsOf(**engine).throughput_items_per_second);
      std::this_thread::sleep_for(microseconds(500));
    }
  }
  EXPECT_GT(max_throughput, 0.0);
  ASSERT_TRUE(answers->WaitForCount(static_cast<size_t>(sent)));
  uint64_t expected_items = 0;
  for (int i = 0; i < sent; ++i) expected_items += 1 + i % 3;
  const uint64_t items = StatsOf(**engine).inference_count;
  EXPECT_EQ(items, expected_items);
  // The collector catches up with what the executor ran (warm-up runs are not counted).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (StatsOf(**engine).device_items != items && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_EQ(StatsOf(**engine).device_items, items);
}

TEST(EngineStatsTest, CollectStatsWithoutTheThread) {
  auto engine = Engine::Create({});  // stats_interval 0: no collector thread
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->LoadModel(IdentitySpec()).ok());
  const auto t0 = std::chrono::steady_clock::now();
  (*engine)->CollectStats(t0);
  auto answers = std::make_shared<AnswerLog>();
  for (int i = 0; i < 10; ++i) (*engine)->Submit(Request(answers, 2));
  ASSERT_TRUE(answers->WaitForCount(10));
  EXPECT_EQ(StatsOf(**engine).device_items, 0u) << "nothing collects without the thread";
  (*engine)->CollectStats(t0 + std::chrono::seconds(2));
  const ModelStatsSnapshot s = StatsOf(**engine);
  EXPECT_EQ(s.device_items, 20u);
  EXPECT_DOUBLE_EQ(s.throughput_items_per_second, 10.0);  // 20 items over 2 s
}

TEST(EngineStatsTest, AccessLogThroughTheEngine) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  constexpr int kRequests = 50;
  {
    common::Logger logger({.queue_capacity = 1000, .sink = f});
    auto engine = Engine::Create({.logger = &logger, .access_log_sample_rate = 1.0});
    ASSERT_TRUE(engine.ok());
    ASSERT_TRUE((*engine)->LoadModel(IdentitySpec()).ok());
    auto answers = std::make_shared<AnswerLog>();
    for (int i = 0; i < kRequests; ++i) {
      auto request = Request(answers);
      request->id = "r" + std::to_string(i);
      (*engine)->Submit(std::move(request));
    }
    (*engine)->Submit(Request(answers, 1, Shape{1, 5}));  // invalid: logged with its status
    ASSERT_TRUE(answers->WaitForCount(kRequests + 1));
    logger.Flush();
    EXPECT_EQ(logger.dropped(), 0u);
  }
  std::fflush(f);
  std::rewind(f);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  std::fclose(f);
  size_t ok_records = 0, failed_records = 0;
  for (size_t pos = text.find(" I access "); pos != std::string::npos;
       pos = text.find(" I access ", pos + 1)) {
    const std::string line = text.substr(pos, text.find('\n', pos) - pos);
    EXPECT_NE(line.find("model=id version=1 id="), std::string::npos) << line;
    if (line.find("status=OK") != std::string::npos) ++ok_records;
    if (line.find("status=INVALID_ARGUMENT") != std::string::npos) ++failed_records;
  }
  EXPECT_EQ(ok_records, static_cast<size_t>(kRequests)) << text;
  EXPECT_EQ(failed_records, 1u) << text;
  EXPECT_NE(text.find("id=r17 batch=1 batch_items="), std::string::npos) << text;
}

}  // namespace
}  // namespace sluice::engine
