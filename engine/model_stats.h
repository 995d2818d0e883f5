#pragma once

// ModelStats: the per-model-version counters that ModelStatistics (and later /metrics) report,
// kept as Triton keeps them: counts and summed nanoseconds per phase, and per batch size.
// Thread-safe; updated once per batch by the completion path, and once per rejected request.

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>

namespace sluice::engine {

struct DurationStat {
  uint64_t count = 0;
  uint64_t ns = 0;
  void Add(std::chrono::nanoseconds d, uint64_t n = 1) {
    count += n;
    ns += static_cast<uint64_t>(d.count()) * n;
  }
};

struct BatchStat {
  DurationStat compute_input;
  DurationStat compute_infer;
  DurationStat compute_output;
};

// A copy of the counters at one moment.
struct ModelStatsSnapshot {
  // Wall-clock milliseconds since the epoch of the last completed inference; 0 if none.
  uint64_t last_inference_ms = 0;
  // Items inferred (a request of batch 4 counts 4), and batches executed.
  uint64_t inference_count = 0;
  uint64_t execution_count = 0;
  // Per request: end-to-end durations of successes and failures, and per phase.
  DurationStat success;
  DurationStat fail;
  DurationStat queue;
  DurationStat compute_input;
  DurationStat compute_infer;
  DurationStat compute_output;
  // Per executed batch size.
  std::map<uint64_t, BatchStat> batch_stats;
  // Requests in the queue when the snapshot was taken.
  uint64_t queue_depth = 0;
};

class ModelStats {
 public:
  // One executed batch: its item count and phase durations, and the requests it answered
  // successfully (`request_count` of them, with summed queue and end-to-end durations).
  void RecordBatch(uint64_t items, uint64_t request_count, std::chrono::nanoseconds input,
                   std::chrono::nanoseconds infer, std::chrono::nanoseconds output,
                   std::chrono::nanoseconds total_queue, std::chrono::nanoseconds total_e2e);
  // One request that failed after it reached the model (rejected, expired or failed in a batch).
  void RecordFailure(std::chrono::nanoseconds e2e);

  ModelStatsSnapshot Snapshot() const;

 private:
  mutable std::mutex mu_;
  ModelStatsSnapshot stats_;  // guarded by mu_
};

}  // namespace sluice::engine
