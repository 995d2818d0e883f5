#pragma once

// The server-side view of a measurement: ModelStatistics counters (KServe v2 statistics
// extension, as sluice and Triton report them) read at the start and end of a window, and the
// per-request averages their difference gives.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/inference_client.h"

namespace sluice::loadtest {

// One model's cumulative counters, summed over the versions the server reports.
struct ServerStatsSnapshot {
  int64_t success_count = 0;  // requests answered successfully
  int64_t success_ns = 0;     // their total time in the server (receive to response)
  int64_t fail_count = 0;
  int64_t queue_count = 0;
  int64_t queue_ns = 0;
  int64_t compute_input_count = 0;
  int64_t compute_input_ns = 0;
  int64_t compute_infer_count = 0;
  int64_t compute_infer_ns = 0;
  int64_t compute_output_count = 0;
  int64_t compute_output_ns = 0;
  int64_t inference_count = 0;  // items (batch elements) computed
  int64_t execution_count = 0;  // batches (model executions)

  // Field-by-field `*this - earlier`.
  ServerStatsSnapshot Minus(const ServerStatsSnapshot& earlier) const;
};

// Reads `model`'s statistics (`version` "" = every version) and sums them. Returns the RPC's
// error (e.g. NotFound for an unknown model, Unimplemented for a server without statistics).
absl::StatusOr<ServerStatsSnapshot> FetchServerStats(client::InferenceClient& client,
                                                     absl::string_view model,
                                                     absl::string_view version);

// Per-request averages over a window, in microseconds, from a snapshot difference.
struct ServerBreakdown {
  bool available = false;  // false when statistics could not be read
  int64_t requests = 0;    // successful requests the server counted
  int64_t failed = 0;
  double queue_us = 0;
  double compute_input_us = 0;
  double compute_infer_us = 0;
  double compute_output_us = 0;
  double total_us = 0;        // average time a request spent in the server
  double avg_batch_size = 0;  // items per model execution (0 when no execution)
};

// The averages of `delta` (each sum divided by its own count; 0 for an empty count).
ServerBreakdown MakeServerBreakdown(const ServerStatsSnapshot& delta);

}  // namespace sluice::loadtest
