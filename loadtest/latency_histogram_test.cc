#include "loadtest/latency_histogram.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::loadtest {
namespace {

// The nearest-rank percentile of `sorted` (the definition LatencyHistogram implements).
int64_t ExactPercentile(const std::vector<int64_t>& sorted, double percentile) {
  if (percentile <= 0) return sorted.front();
  int64_t rank = static_cast<int64_t>(std::ceil(percentile / 100.0 * sorted.size() - 1e-9));
  rank = std::clamp<int64_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

void ExpectPercentilesWithinPrecision(const std::vector<int64_t>& samples) {
  LatencyHistogram histogram;
  for (int64_t v : samples) histogram.Record(v);
  std::vector<int64_t> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  for (double p : {0.0, 1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0}) {
    const double exact = static_cast<double>(ExactPercentile(sorted, p));
    const double reported = static_cast<double>(histogram.ValueAtPercentile(p));
    // The stated precision (1/256), and in any case the 1% the load tester promises.
    EXPECT_LE(std::abs(reported - exact), LatencyHistogram::kRelativePrecision * exact + 0.5)
        << "p" << p << " exact " << exact << " reported " << reported;
    EXPECT_LE(std::abs(reported - exact), 0.01 * exact + 0.5) << "p" << p;
  }
  EXPECT_EQ(histogram.min_ns(), sorted.front());
  EXPECT_EQ(histogram.max_ns(), sorted.back());
  EXPECT_EQ(histogram.count(), static_cast<int64_t>(samples.size()));
}

TEST(LatencyHistogramTest, EmptyReportsZeros) {
  LatencyHistogram histogram;
  EXPECT_EQ(histogram.count(), 0);
  EXPECT_EQ(histogram.ValueAtPercentile(50), 0);
  EXPECT_EQ(histogram.min_ns(), 0);
  EXPECT_EQ(histogram.max_ns(), 0);
  EXPECT_EQ(histogram.mean_ns(), 0);
}

TEST(LatencyHistogramTest, LogNormalSamplesFromMicrosecondsToSeconds) {
  std::mt19937_64 random(42);
  // Median ~1 ms, spread over 1 us .. 10 s.
  std::lognormal_distribution<double> latency(std::log(1e6), 2.0);
  std::vector<int64_t> samples;
  for (int i = 0; i < 200'000; ++i) {
    samples.push_back(
        std::clamp<int64_t>(static_cast<int64_t>(latency(random)), 1'000, 10'000'000'000));
  }
  ExpectPercentilesWithinPrecision(samples);
}

TEST(LatencyHistogramTest, UniformMicroseconds) {
  std::vector<int64_t> samples;
  for (int64_t us = 1; us <= 1000; ++us) samples.push_back(us * 1000);
  ExpectPercentilesWithinPrecision(samples);
  LatencyHistogram histogram;
  for (int64_t v : samples) histogram.Record(v);
  EXPECT_NEAR(histogram.ValueAtPercentile(50), 500'000, 500'000 * 0.004);
  EXPECT_NEAR(histogram.ValueAtPercentile(99), 990'000, 990'000 * 0.004);
  EXPECT_DOUBLE_EQ(histogram.mean_ns(), 500'500.0);
}

TEST(LatencyHistogramTest, FewSamplesAndSmallValuesAreExact) {
  LatencyHistogram histogram;
  for (int64_t v : {5, 100, 200, 255}) histogram.Record(v);
  EXPECT_EQ(histogram.ValueAtPercentile(25), 5);
  EXPECT_EQ(histogram.ValueAtPercentile(50), 100);
  EXPECT_EQ(histogram.ValueAtPercentile(75), 200);
  EXPECT_EQ(histogram.ValueAtPercentile(100), 255);
}

TEST(LatencyHistogramTest, WideValuesAtEveryOctave) {
  std::vector<int64_t> samples;
  for (int64_t v = 1'000; v < 90'000'000'000; v = v * 3 / 2 + 7) samples.push_back(v);
  ExpectPercentilesWithinPrecision(samples);
}

TEST(LatencyHistogramTest, MergeEqualsRecordingEverything) {
  LatencyHistogram a, b, all;
  for (int64_t i = 1; i <= 5000; ++i) {
    const int64_t v = i * 7919 % 100'000 + 1'000;
    (i % 3 == 0 ? a : b).Record(v);
    all.Record(v);
  }
  a.Merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.min_ns(), all.min_ns());
  EXPECT_EQ(a.max_ns(), all.max_ns());
  EXPECT_DOUBLE_EQ(a.mean_ns(), all.mean_ns());
  for (double p : {1.0, 50.0, 90.0, 99.0, 99.9}) {
    EXPECT_EQ(a.ValueAtPercentile(p), all.ValueAtPercentile(p)) << p;
  }
  a.Clear();
  EXPECT_EQ(a.count(), 0);
  EXPECT_EQ(a.ValueAtPercentile(99), 0);
}

TEST(LatencyHistogramTest, ClampsBeyondTheTrackedRange) {
  LatencyHistogram histogram;
  histogram.Record(-5);
  histogram.Record(LatencyHistogram::kMaxTrackedNs * 3);
  EXPECT_EQ(histogram.clamped_count(), 1);
  EXPECT_EQ(histogram.min_ns(), 0);
  EXPECT_EQ(histogram.max_ns(), LatencyHistogram::kMaxTrackedNs);
  EXPECT_EQ(histogram.ValueAtPercentile(100), LatencyHistogram::kMaxTrackedNs);
}

TEST(LatencyHistogramTest, MemoryIsBounded) {
  // ~4k buckets cover 0..100 s at < 1% precision, whatever the sample count.
  EXPECT_LT(LatencyHistogram::BucketCount(), 5000);
  EXPECT_LT(LatencyHistogram::kRelativePrecision, 0.01);
}

}  // namespace
}  // namespace sluice::loadtest
