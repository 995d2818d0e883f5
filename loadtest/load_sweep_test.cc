#include "loadtest/load_sweep.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loadtest/load_runner.h"

namespace sluice::loadtest {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(LoadSweepTest, ParsesEveryForm) {
  EXPECT_THAT(*ParseIntegerSweep("1:64:x2", 4096), ElementsAre(1, 2, 4, 8, 16, 32, 64));
  EXPECT_THAT(*ParseIntegerSweep("1:10:x2", 4096), ElementsAre(1, 2, 4, 8));
  EXPECT_THAT(*ParseIntegerSweep("8", 4096), ElementsAre(8));
  EXPECT_THAT(*ParseIntegerSweep("1:4", 4096), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(*ParseIntegerSweep("4:16:+4", 4096), ElementsAre(4, 8, 12, 16));
  EXPECT_THAT(*ParseSweep("100:400:+100"), ElementsAre(100, 200, 300, 400));
  EXPECT_THAT(*ParseSweep("0.5:2:x2"), ElementsAre(0.5, 1, 2));
  EXPECT_EQ(ParseSweep("0.1:0.3:+0.1")->size(), 3u);
}

TEST(LoadSweepTest, RejectsMalformedSpecs) {
  for (const char* bad :
       {"", "0", "-1", "a", "4:1", "1:8:x1", "1:8:+0", "1:2:3:4", "1:8:xq", "1:1000"}) {
    absl::StatusOr<std::vector<double>> levels = ParseSweep(bad);
    EXPECT_FALSE(levels.ok()) << bad;
    if (!levels.ok()) {
      EXPECT_THAT(std::string(levels.status().message()), HasSubstr("bad sweep"));
    }
  }
  EXPECT_FALSE(ParseIntegerSweep("0.5", 4096).ok());
  EXPECT_FALSE(ParseIntegerSweep("1:4:x1.5", 4096).ok());
  EXPECT_FALSE(ParseIntegerSweep("8192", 4096).ok());
}

WindowSummary Window(double rps, double p99_us) {
  WindowSummary w;
  w.throughput_rps = rps;
  w.p99_us = p99_us;
  return w;
}

TEST(StabilityTest, NeedsThreeWindowsWithinTolerance) {
  EXPECT_FALSE(IsStable({Window(100, 10), Window(100, 10)}, 10));
  EXPECT_TRUE(IsStable({Window(100, 10), Window(105, 10.5), Window(96, 9.6)}, 10));
  // Only the last three count.
  EXPECT_TRUE(IsStable({Window(10, 1), Window(100, 10), Window(100, 10), Window(100, 10)}, 10));
  // Throughput unstable.
  EXPECT_FALSE(IsStable({Window(100, 10), Window(130, 10), Window(100, 10)}, 10));
  // p99 unstable.
  EXPECT_FALSE(IsStable({Window(100, 10), Window(100, 15), Window(100, 10)}, 10));
  // Nothing measured is never stable.
  EXPECT_FALSE(IsStable({Window(0, 0), Window(0, 0), Window(0, 0)}, 10));
}

TEST(LoadModeTest, ParsesNames) {
  EXPECT_EQ(*ParseLoadMode("sync"), LoadMode::kSync);
  EXPECT_EQ(*ParseLoadMode("stream"), LoadMode::kStream);
  EXPECT_FALSE(ParseLoadMode("udp").ok());
  EXPECT_EQ(*ParseArrivalProcess("poisson"), ArrivalProcess::kPoisson);
  EXPECT_FALSE(ParseArrivalProcess("bursty").ok());
}

}  // namespace
}  // namespace sluice::loadtest
