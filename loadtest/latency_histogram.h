#pragma once

// LatencyHistogram: a log-bucketed latency histogram with bounded memory and a stated precision,
// in the manner of HdrHistogram (2 significant binary digits per octave would be too coarse; this
// one keeps 7: 128 sub-buckets per power of two).
//
// Precision: a value v is counted in a bucket [low, high] with (high - low + 1) <= v / 128, and
// a percentile is reported as the midpoint of its bucket (clamped to the exact minimum and
// maximum), so every reported percentile is within 1/256 (< 0.4%) of the exact nearest-rank
// percentile of the recorded values (values below 128 ns are exact). The tracked range is 0 to
// kMaxTrackedNs (100 s): longer latencies are counted as 100 s (clamped_count() says how many).
//
// Memory: a fixed ~32 KB per histogram (kBucketCount counters), whatever the number of samples.
//
// Thread-safety: none. A histogram is a plain value; callers that record from several threads
// guard it (WindowCollector does).

#include <cstdint>
#include <vector>

namespace sluice::loadtest {

class LatencyHistogram {
 public:
  // Latencies above this are recorded as this value.
  static constexpr int64_t kMaxTrackedNs = 100'000'000'000;  // 100 s
  // Sub-buckets per power of two: the bucket width is at most value / kSubBuckets.
  static constexpr int kSubBucketBits = 7;
  static constexpr int64_t kSubBuckets = int64_t{1} << kSubBucketBits;
  // Upper bound of |reported - exact| / exact for any percentile.
  static constexpr double kRelativePrecision = 1.0 / (2 * kSubBuckets);

  LatencyHistogram();

  // Counts one latency. Negative values count as 0; values above kMaxTrackedNs as kMaxTrackedNs.
  void Record(int64_t latency_ns);
  // Adds every sample of `other` to this histogram.
  void Merge(const LatencyHistogram& other);
  // Forgets every sample (keeps the memory).
  void Clear();

  int64_t count() const { return count_; }
  int64_t clamped_count() const { return clamped_count_; }
  // Exact smallest / largest recorded value (after clamping); 0 when empty.
  int64_t min_ns() const { return count_ == 0 ? 0 : min_ns_; }
  int64_t max_ns() const { return max_ns_; }
  // Exact mean of the recorded values (after clamping); 0 when empty.
  double mean_ns() const;

  // The nearest-rank percentile: the smallest recorded value v such that at least `percentile`
  // percent of the samples are <= v, within kRelativePrecision. `percentile` is clamped to
  // [0, 100]; 0 gives the minimum, 100 the maximum. Returns 0 when empty.
  int64_t ValueAtPercentile(double percentile) const;

  // Number of buckets (the memory bound); exposed for tests.
  static int BucketCount();

 private:
  static int BucketIndex(int64_t value_ns);
  static int64_t BucketLowNs(int index);
  static int64_t BucketHighNs(int index);

  std::vector<int64_t> buckets_;
  int64_t count_ = 0;
  int64_t clamped_count_ = 0;
  int64_t min_ns_ = 0;
  int64_t max_ns_ = 0;
  // Sum in double: 1e7 samples of 100 s would overflow nothing, but keeps the mean exact enough.
  double sum_ns_ = 0;
};

}  // namespace sluice::loadtest
