#include "loadtest/window_collector.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace sluice::loadtest {
namespace {

TEST(WindowCollectorTest, SuccessesAndFailuresKeepTheirOwnLatencies) {
  WindowCollector collector;
  collector.RecordSent();
  collector.RecordSent();
  collector.RecordSent();
  collector.RecordResult(absl::OkStatus(), 20'000'000);
  collector.RecordResult(absl::ResourceExhaustedError("queue is full"), 300'000);
  collector.RecordResult(absl::ResourceExhaustedError("queue is full again"), 500'000);

  WindowRecord window = collector.TakeWindow();
  EXPECT_EQ(window.sent, 3);
  EXPECT_EQ(window.succeeded, 1);
  EXPECT_EQ(window.failed, 2);
  EXPECT_EQ(window.latency.count(), 1);
  EXPECT_EQ(window.latency.max_ns(), 20'000'000);
  // A fast rejection does not vanish into (or pull down) the success latencies.
  EXPECT_EQ(window.failed_latency.count(), 2);
  EXPECT_EQ(window.failed_latency.min_ns(), 300'000);
  EXPECT_EQ(window.failed_latency.max_ns(), 500'000);
  EXPECT_EQ(window.errors_by_code.at(absl::StatusCode::kResourceExhausted), 2);
  EXPECT_EQ(window.first_error_by_code.at(absl::StatusCode::kResourceExhausted), "queue is full");

  WindowRecord merged;
  merged.Merge(window);
  merged.Merge(window);
  EXPECT_EQ(merged.failed_latency.count(), 4);
  EXPECT_EQ(collector.TakeWindow().failed_latency.count(), 0);  // a new window starts empty
}

}  // namespace
}  // namespace sluice::loadtest
