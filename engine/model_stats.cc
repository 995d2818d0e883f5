#include "engine/model_stats.h"

namespace sluice::engine {

void ModelStats::RecordBatch(uint64_t items, uint64_t request_count, std::chrono::nanoseconds input,
                             std::chrono::nanoseconds infer, std::chrono::nanoseconds output,
                             std::chrono::nanoseconds total_queue,
                             std::chrono::nanoseconds total_e2e) {
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.last_inference_ms = static_cast<uint64_t>(now_ms);
  stats_.inference_count += items;
  stats_.execution_count += 1;
  // Every request of the batch spent the batch's compute time (as Triton reports it).
  stats_.compute_input.Add(input, request_count);
  stats_.compute_infer.Add(infer, request_count);
  stats_.compute_output.Add(output, request_count);
  stats_.queue.count += request_count;
  stats_.queue.ns += static_cast<uint64_t>(total_queue.count());
  stats_.success.count += request_count;
  stats_.success.ns += static_cast<uint64_t>(total_e2e.count());
  BatchStat& batch = stats_.batch_stats[items];
  batch.compute_input.Add(input);
  batch.compute_infer.Add(infer);
  batch.compute_output.Add(output);
}

void ModelStats::RecordFailure(std::chrono::nanoseconds e2e) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.fail.Add(e2e);
}

ModelStatsSnapshot ModelStats::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace sluice::engine
