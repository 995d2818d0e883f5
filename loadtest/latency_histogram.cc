#include "loadtest/latency_histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace sluice::loadtest {

// Layout (HdrHistogram's, with unit 1 ns): values below kSubBuckets have a bucket each; above,
// the value's octave e (so that value >> e is in [kSubBuckets, 2 * kSubBuckets)) selects a run of
// kSubBuckets buckets each 2^e wide. The index is e * kSubBuckets + (value >> e), which is
// continuous with the exact buckets below.
int LatencyHistogram::BucketIndex(int64_t value_ns) {
  const uint64_t value = static_cast<uint64_t>(value_ns);
  if (value < static_cast<uint64_t>(kSubBuckets)) return static_cast<int>(value);
  const int octave = std::bit_width(value) - 1 - kSubBucketBits;
  return static_cast<int>(octave * kSubBuckets + static_cast<int64_t>(value >> octave));
}

int64_t LatencyHistogram::BucketLowNs(int index) {
  if (index < 2 * kSubBuckets) return index;
  const int octave = static_cast<int>(index / kSubBuckets) - 1;
  const int64_t mantissa = index - octave * kSubBuckets;  // in [kSubBuckets, 2 * kSubBuckets)
  return mantissa << octave;
}

int64_t LatencyHistogram::BucketHighNs(int index) {
  if (index < 2 * kSubBuckets) return index;
  const int octave = static_cast<int>(index / kSubBuckets) - 1;
  return BucketLowNs(index) + (int64_t{1} << octave) - 1;
}

int LatencyHistogram::BucketCount() { return BucketIndex(kMaxTrackedNs) + 1; }

LatencyHistogram::LatencyHistogram() : buckets_(BucketCount(), 0) {}

void LatencyHistogram::Record(int64_t latency_ns) {
  if (latency_ns < 0) latency_ns = 0;
  if (latency_ns > kMaxTrackedNs) {
    latency_ns = kMaxTrackedNs;
    ++clamped_count_;
  }
  ++buckets_[BucketIndex(latency_ns)];
  if (count_ == 0 || latency_ns < min_ns_) min_ns_ = latency_ns;
  max_ns_ = std::max(max_ns_, latency_ns);
  ++count_;
  sum_ns_ += static_cast<double>(latency_ns);
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  if (other.count_ == 0) return;
  for (size_t i = 0; i < buckets_.size(); ++i) buckets_[i] += other.buckets_[i];
  min_ns_ = count_ == 0 ? other.min_ns_ : std::min(min_ns_, other.min_ns_);
  max_ns_ = std::max(max_ns_, other.max_ns_);
  count_ += other.count_;
  clamped_count_ += other.clamped_count_;
  sum_ns_ += other.sum_ns_;
}

void LatencyHistogram::Clear() {
  std::fill(buckets_.begin(), buckets_.end(), 0);
  count_ = 0;
  clamped_count_ = 0;
  min_ns_ = 0;
  max_ns_ = 0;
  sum_ns_ = 0;
}

double LatencyHistogram::mean_ns() const {
  return count_ == 0 ? 0.0 : sum_ns_ / static_cast<double>(count_);
}

int64_t LatencyHistogram::ValueAtPercentile(double percentile) const {
  if (count_ == 0) return 0;
  percentile = std::clamp(percentile, 0.0, 100.0);
  if (percentile <= 0.0) return min_ns_;
  if (percentile >= 100.0) return max_ns_;
  // Nearest rank: the ceil(p/100 * N)-th smallest sample (1-based). The small epsilon keeps
  // p = 50 of N = 10 at rank 5 despite floating-point error in p/100 * N.
  int64_t rank = static_cast<int64_t>(std::ceil(percentile / 100.0 * count_ - 1e-9));
  rank = std::clamp<int64_t>(rank, 1, count_);
  int64_t seen = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    seen += buckets_[i];
    if (seen >= rank) {
      const int index = static_cast<int>(i);
      const int64_t mid = BucketLowNs(index) + (BucketHighNs(index) - BucketLowNs(index)) / 2;
      return std::clamp(mid, min_ns_, max_ns_);
    }
  }
  return max_ns_;
}

}  // namespace sluice::loadtest
