#include "engine/stats_collector.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

using std::chrono::milliseconds;

TEST(StatsCollectorTest, RejectsBadOptions) {
  EXPECT_FALSE(StatsCollector::Start({.interval = milliseconds(0)}, [](auto) {}).ok());
  EXPECT_FALSE(StatsCollector::Start({.interval = milliseconds(10)}, nullptr).ok());
}

TEST(StatsCollectorTest, CollectsAtTheIntervalUntilStopped) {
  std::atomic<int> calls{0};
  auto collector =
      StatsCollector::Start({.interval = milliseconds(10)}, [&](auto) { calls.fetch_add(1); });
  ASSERT_TRUE(collector.ok()) << collector.status();
  std::this_thread::sleep_for(milliseconds(200));
  (*collector)->Stop();
  const int after_stop = calls.load();
  // ~21 expected (one at once, then every 10 ms); loose bounds for a loaded machine.
  EXPECT_GE(after_stop, 5);
  EXPECT_LE(after_stop, 25);
  EXPECT_EQ((*collector)->collections(), static_cast<uint64_t>(after_stop));
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(calls.load(), after_stop) << "no collection after Stop()";
  (*collector)->Stop();  // idempotent
}

TEST(StatsCollectorTest, StopDoesNotWaitForTheInterval) {
  auto collector = StatsCollector::Start({.interval = std::chrono::hours(1)}, [](auto) {});
  ASSERT_TRUE(collector.ok());
  const auto start = std::chrono::steady_clock::now();
  collector->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(StatsCollectorTest, PassesIncreasingTimes) {
  std::atomic<int> calls{0};
  std::atomic<bool> increasing{true};
  std::chrono::steady_clock::time_point last{};
  auto collector = StatsCollector::Start({.interval = milliseconds(5)}, [&](auto now) {
    if (now <= last) increasing = false;
    last = now;
    calls.fetch_add(1);
  });
  ASSERT_TRUE(collector.ok());
  while (calls.load() < 5) std::this_thread::sleep_for(milliseconds(1));
  (*collector)->Stop();
  EXPECT_TRUE(increasing.load());
}

}  // namespace
}  // namespace sluice::engine
