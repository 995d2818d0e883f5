#include "loadtest/server_stats.h"

namespace sluice::loadtest {

ServerStatsSnapshot ServerStatsSnapshot::Minus(const ServerStatsSnapshot& earlier) const {
  ServerStatsSnapshot d;
  d.success_count = success_count - earlier.success_count;
  d.success_ns = success_ns - earlier.success_ns;
  d.fail_count = fail_count - earlier.fail_count;
  d.queue_count = queue_count - earlier.queue_count;
  d.queue_ns = queue_ns - earlier.queue_ns;
  d.compute_input_count = compute_input_count - earlier.compute_input_count;
  d.compute_input_ns = compute_input_ns - earlier.compute_input_ns;
  d.compute_infer_count = compute_infer_count - earlier.compute_infer_count;
  d.compute_infer_ns = compute_infer_ns - earlier.compute_infer_ns;
  d.compute_output_count = compute_output_count - earlier.compute_output_count;
  d.compute_output_ns = compute_output_ns - earlier.compute_output_ns;
  d.inference_count = inference_count - earlier.inference_count;
  d.execution_count = execution_count - earlier.execution_count;
  return d;
}

absl::StatusOr<ServerStatsSnapshot> FetchServerStats(client::InferenceClient& client,
                                                     absl::string_view model,
                                                     absl::string_view version) {
  absl::StatusOr<inference::ModelStatisticsResponse> response =
      client.ModelStatistics(model, version);
  if (!response.ok()) return response.status();
  ServerStatsSnapshot total;
  for (const inference::ModelStatistics& stats : response->model_stats()) {
    if (stats.name() != model) continue;
    const inference::InferStatistics& infer = stats.inference_stats();
    total.success_count += static_cast<int64_t>(infer.success().count());
    total.success_ns += static_cast<int64_t>(infer.success().ns());
    total.fail_count += static_cast<int64_t>(infer.fail().count());
    total.queue_count += static_cast<int64_t>(infer.queue().count());
    total.queue_ns += static_cast<int64_t>(infer.queue().ns());
    total.compute_input_count += static_cast<int64_t>(infer.compute_input().count());
    total.compute_input_ns += static_cast<int64_t>(infer.compute_input().ns());
    total.compute_infer_count += static_cast<int64_t>(infer.compute_infer().count());
    total.compute_infer_ns += static_cast<int64_t>(infer.compute_infer().ns());
    total.compute_output_count += static_cast<int64_t>(infer.compute_output().count());
    total.compute_output_ns += static_cast<int64_t>(infer.compute_output().ns());
    total.inference_count += static_cast<int64_t>(stats.inference_count());
    total.execution_count += static_cast<int64_t>(stats.execution_count());
  }
  return total;
}

namespace {
double AverageUs(int64_t total_ns, int64_t count) {
  return count <= 0 ? 0.0 : static_cast<double>(total_ns) / static_cast<double>(count) / 1e3;
}
}  // namespace

ServerBreakdown MakeServerBreakdown(const ServerStatsSnapshot& delta) {
  ServerBreakdown b;
  b.available = true;
  b.requests = delta.success_count;
  b.failed = delta.fail_count;
  b.queue_us = AverageUs(delta.queue_ns, delta.queue_count);
  b.compute_input_us = AverageUs(delta.compute_input_ns, delta.compute_input_count);
  b.compute_infer_us = AverageUs(delta.compute_infer_ns, delta.compute_infer_count);
  b.compute_output_us = AverageUs(delta.compute_output_ns, delta.compute_output_count);
  b.total_us = AverageUs(delta.success_ns, delta.success_count);
  b.avg_batch_size = delta.execution_count <= 0 ? 0.0
                                                : static_cast<double>(delta.inference_count) /
                                                      static_cast<double>(delta.execution_count);
  return b;
}

}  // namespace sluice::loadtest
