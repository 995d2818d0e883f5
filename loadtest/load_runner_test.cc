#include "loadtest/load_runner.h"

#include "gtest/gtest.h"

namespace sluice::loadtest {
namespace {

RunOptions Options() {
  RunOptions options;
  options.warmup_ms = 1000;
  options.window_ms = 2000;
  options.max_windows = 10;
  return options;
}

TEST(RemainingAtMostMsTest, ThisLevelThenEveryLaterLevelAtItsLongest) {
  // 5 s left of this level, then 2 levels of 1 s warm-up + 10 x 2 s windows.
  EXPECT_EQ(RemainingAtMostMs(5000, 2, Options(), 3600000), 5000 + 2 * 21000);
  EXPECT_EQ(RemainingAtMostMs(5000, 0, Options(), 3600000), 5000);
}

TEST(RemainingAtMostMsTest, CappedByTheRunsDeadlineAndNeverNegative) {
  EXPECT_EQ(RemainingAtMostMs(5000, 2, Options(), 10000), 10000);
  EXPECT_EQ(RemainingAtMostMs(-30, 0, Options(), 10000), 0);
  EXPECT_EQ(RemainingAtMostMs(5000, 1, Options(), -5), 0);
}

TEST(FormatProgressLineTest, EndsWithTheEta) {
  Progress p;
  p.level_index = 1;
  p.level_count = 5;
  p.level_label = "concurrency 8";
  p.phase = "window 3/10";
  p.current_succeeded = 1200;
  p.last_window_rps = 410.2;
  p.last_window_p99_us = 3120;
  p.remaining_at_most_ms = 65000;
  EXPECT_EQ(FormatProgressLine(p),
            "[2/5] concurrency 8, window 3/10: 1200 ok, 0 failed | last window 410.2 req/s, p99 "
            "3.120 ms | ETA <= 1m05s");
  p.remaining_at_most_ms = 1;  // rounded up: never "0s" while something is left
  EXPECT_NE(FormatProgressLine(p).find("| ETA <= 1s"), std::string::npos);
  p.remaining_at_most_ms = 2 * 3600000 + 5 * 60000;
  EXPECT_NE(FormatProgressLine(p).find("| ETA <= 2h05m"), std::string::npos);
  p.remaining_at_most_ms = -1;  // not known: no ETA
  EXPECT_EQ(FormatProgressLine(p).find("ETA"), std::string::npos);
}

}  // namespace
}  // namespace sluice::loadtest
