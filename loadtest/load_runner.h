#pragma once

// RunLoad: drives one model on a KServe v2 server through a list of load levels and measures
// each one. For each level it starts a load generator, lets it warm up, then takes measurement
// windows until throughput and p99 latency are stable over the last kStabilityWindows windows
// (or a limit is reached), stops the generator and waits for its outstanding requests.
//
// Load generators:
//   closed loop (RunOptions::concurrency_levels): N requests always outstanding; each answer
//     sends the next request at once.
//       LoadMode::kSync   N threads, each a blocking Infer() after another
//       LoadMode::kAsync  N chains of AsyncInfer (gRPC callback API, no thread per request)
//       LoadMode::kStream one ModelStreamInfer stream carrying N requests in flight
//   open loop (RunOptions::request_rates): one scheduler thread sends at the target rate
//     (constant gaps or Poisson arrivals) whatever the answers, with kAsync or kStream.
//     At most RunOptions::max_outstanding requests are in flight: a request whose turn comes
//     while the cap is reached is skipped and counted (`skipped`); one sent more than
//     kLateThreshold after its scheduled time is counted as `sent_late`. Both are "not sent on
//     time": the server, or this client, did not keep up with the rate.
//
// Latency is measured per request, from just before the send call to the answer's arrival in
// the callback (or the return of Infer()), for successful requests; failures are counted by
// status code. Server-side averages come from ModelStatistics read at every window boundary.
//
// Bounds: every level ends after max_windows windows; the whole run after max_requests requests
// or max_duration_ms (the current window is cut short, the remaining levels are not run);
// stopping a level waits at most drain_timeout_ms for outstanding requests (each request also
// carries the client's own deadline). Memory is bounded: a fixed-size histogram per window and at
// most max_outstanding (open loop) or N (closed loop) requests in flight.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/inference_client.h"
#include "loadtest/server_stats.h"

namespace sluice::loadtest {

enum class LoadMode { kSync, kAsync, kStream };
enum class ArrivalProcess { kConstant, kPoisson };

// "sync" | "async" | "stream"; InvalidArgument otherwise.
absl::StatusOr<LoadMode> ParseLoadMode(absl::string_view text);
absl::string_view LoadModeName(LoadMode mode);
// "constant" | "poisson"; InvalidArgument otherwise.
absl::StatusOr<ArrivalProcess> ParseArrivalProcess(absl::string_view text);
absl::string_view ArrivalProcessName(ArrivalProcess arrivals);

// Open loop: a send this much behind its schedule counts as late.
inline constexpr int64_t kLateThresholdUs = 1000;
// Stability is judged over this many consecutive windows.
inline constexpr int kStabilityWindows = 3;

// Where a run stands, for a progress line. Passed to RunOptions::on_progress.
struct Progress {
  int level_index = 0;  // 0-based
  int level_count = 0;
  std::string level_label;  // "concurrency 8" or "rate 200/s"
  std::string phase;        // "warm-up", "window 2/10", "drain"
  int64_t current_succeeded = 0;
  int64_t current_failed = 0;
  double last_window_rps = 0;  // 0 before the first window
  double last_window_p99_us = 0;
  // The run's time left at most, in ms (RemainingAtMostMs): this level's windows still allowed,
  // then every later level's warm-up and --max-windows, capped by --max-duration-s. A level that
  // turns stable, or --max-requests, ends it sooner. -1: not known yet.
  int64_t remaining_at_most_ms = -1;
};

// One request to send, and the real tokens it carries (the request's token count for a sequence
// model, counted from its attention_mask or input_ids; 0 when not known), for tokens/s.
struct OutgoingRequest {
  std::shared_ptr<const inference::ModelInferRequest> request;
  int64_t tokens = 0;
};

struct RunOptions {
  // The model whose statistics give the server-side breakdown (the request names it too).
  std::string model_name;
  std::string model_version;  // "" = the server's choice
  LoadMode mode = LoadMode::kAsync;

  // Exactly one of these is non-empty: closed loop at each concurrency, or open loop at each rate
  // (requests per second).
  std::vector<int64_t> concurrency_levels;
  std::vector<double> request_rates;
  ArrivalProcess arrivals = ArrivalProcess::kConstant;
  // Open loop: most requests in flight at once.
  int64_t max_outstanding = 1024;

  // Items per request (the request's batch size), to report inferences per second.
  int64_t batch_size = 1;
  // Real tokens in RunLoad's `request` (RequestTokens()), to report tokens per second; 0: not a
  // sequence model, nothing reported.
  int64_t request_tokens = 0;

  // Load before the first window of each level, not measured.
  int64_t warmup_ms = 1000;
  // Length of one measurement window.
  int64_t window_ms = 2000;
  // A level is stable when, over the last kStabilityWindows windows, throughput and p99 each stay
  // within this percentage of their mean.
  double stability_percent = 10;
  // Most windows per level (stable or not); at least 1.
  int max_windows = 10;

  // Whole-run bounds.
  int64_t max_requests = 5'000'000;
  int64_t max_duration_ms = 300'000;
  // After a level, how long to wait for outstanding requests before cancelling them.
  int64_t drain_timeout_ms = 10'000;

  // Seed of the Poisson arrivals and of the choice among request_variants.
  uint64_t seed = 0;

  // --protocol http: makes the sender of one closed-loop thread (each its own keep-alive
  // connection); every call sends the request once and blocks for the answer. Only with
  // LoadMode::kSync. Empty: requests go over gRPC through the client (which still reads the
  // server's statistics either way).
  std::function<absl::StatusOr<std::function<absl::Status()>>()> make_sync_sender;

  // Every gRPC send of the run is numbered 0, 1, 2, ... (one counter across levels and threads);
  // these two replace RunLoad's `request` by a request chosen by that number, so that which
  // requests a run sends depends on `seed` alone (not their order: threads interleave).
  // Neither is used by make_sync_sender (HTTP), which sends its own body.
  //
  // --seq-len MIN:MAX: when set, send number k is request_source(k) (ragged traffic). Called
  // from any sending thread, concurrently.
  std::function<OutgoingRequest(uint64_t)> request_source;
  // --text-file: when non-empty (and request_source is not set), send number k is one of these
  // drawn uniformly from (seed, k); tokens are not counted (the server tokenizes).
  std::vector<std::shared_ptr<const inference::ModelInferRequest>> request_variants;

  // Called about every progress_interval_ms from the thread running RunLoad (may be empty).
  std::function<void(const Progress&)> on_progress;
  int64_t progress_interval_ms = 250;
};

// Latency percentiles of the successful requests, in microseconds.
struct LatencySummary {
  double mean_us = 0;
  double min_us = 0;
  double p50_us = 0;
  double p90_us = 0;
  double p95_us = 0;
  double p99_us = 0;
  double p999_us = 0;
  double max_us = 0;
};

// One window, as the stability check saw it.
struct WindowSummary {
  double duration_s = 0;
  int64_t succeeded = 0;
  int64_t failed = 0;
  double throughput_rps = 0;
  double p99_us = 0;
};

// The measurement of one load level: the last kStabilityWindows windows (fewer if the level
// ended sooner) taken together.
struct LevelResult {
  int64_t concurrency = 0;  // closed loop; 0 in open loop
  double request_rate = 0;  // open loop: the target rate; 0 in closed loop

  std::vector<WindowSummary> windows;  // every window of the level, in order
  int windows_reported = 0;            // how many of the last ones the figures below cover
  bool stable = false;
  std::string end_reason;  // "stable", "max windows", "max requests", "max duration", ...

  double duration_s = 0;
  int64_t succeeded = 0;
  int64_t failed = 0;
  int64_t sent = 0;
  int64_t sent_late = 0;
  int64_t skipped = 0;
  double throughput_rps = 0;    // successful requests per second
  double inferences_per_s = 0;  // throughput_rps * batch size
  // Real tokens of the successful requests per second (RunOptions::request_tokens /
  // request_source); 0 when the requests' tokens are not known.
  double tokens_per_s = 0;
  // Mean real tokens per successful request over the same windows (0: not known).
  double mean_request_tokens = 0;
  double sent_rps = 0;  // requests sent per second (the offered load in open loop)
  LatencySummary latency;
  // The failed requests' latency (all codes together); zeros when none failed.
  LatencySummary failed_latency;
  std::map<absl::StatusCode, int64_t> errors_by_code;
  std::map<absl::StatusCode, std::string> first_error_by_code;
  ServerBreakdown server;  // over the same windows
};

// Counts over the whole run, warm-up and drain included: `succeeded` is what the server's
// ModelStatistics success count grows by during the run (when nothing else sends to the model).
struct RunTotals {
  int64_t sent = 0;
  int64_t succeeded = 0;
  int64_t failed = 0;
  int64_t sent_late = 0;
  int64_t skipped = 0;
  double duration_s = 0;
  // Real tokens of the successful requests (0 when their tokens are not known).
  int64_t succeeded_tokens = 0;
};

struct RunResult {
  std::vector<LevelResult> levels;  // the levels run, in order
  RunTotals totals;
  // OK, or why the run stopped before its last level (the levels run so far are still reported):
  // DeadlineExceeded (max duration), ResourceExhausted (max requests), or the error that made a
  // whole window fail.
  absl::Status early_stop;
  // True when early_stop is a failure (a window in which nothing succeeded) rather than a limit.
  bool aborted = false;
};

// Runs every level of `options` against `client`, sending `request` (shared, never modified;
// its model_name is the model under test). InvalidArgument for inconsistent options (neither or
// both of concurrency/rates, open loop with kSync, a non-positive window, ...). Otherwise
// returns the result, also when requests failed (they are counted in the result).
// REQUIRES: `client` outlives the call; nothing else uses the client's AsyncInfer meanwhile
// (the async generator waits for all of the client's async calls when a level stops).
absl::StatusOr<RunResult> RunLoad(client::InferenceClient& client,
                                  std::shared_ptr<const inference::ModelInferRequest> request,
                                  const RunOptions& options);

// The bound in Progress::remaining_at_most_ms: `level_left_ms` (what the current level may still
// take), then `levels_after` levels of options.warmup_ms + options.max_windows *
// options.window_ms each, capped at `deadline_left_ms` (the time to --max-duration-s). Negative
// inputs count as 0; never negative.
[[nodiscard]] int64_t RemainingAtMostMs(int64_t level_left_ms, int levels_after,
                                        const RunOptions& options, int64_t deadline_left_ms);

// The live progress line (without the terminal's carriage return): "[2/5] concurrency 8, window
// 3/10: 1200 ok, 0 failed | last window 410.2 req/s, p99 3.120 ms | ETA <= 1m05s".
std::string FormatProgressLine(const Progress& progress);

// The stability rule on its own: true if `windows` has at least kStabilityWindows entries and,
// over the last kStabilityWindows, throughput and p99 each stay within `percent` of their mean.
bool IsStable(const std::vector<WindowSummary>& windows, double percent);

}  // namespace sluice::loadtest
