#include "loadtest/load_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "loadtest/load_generator.h"
#include "loadtest/window_collector.h"

namespace sluice::loadtest {

absl::StatusOr<LoadMode> ParseLoadMode(absl::string_view text) {
  if (text == "sync") return LoadMode::kSync;
  if (text == "async") return LoadMode::kAsync;
  if (text == "stream") return LoadMode::kStream;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown mode '", text, "' (expected sync, async or stream)"));
}

absl::string_view LoadModeName(LoadMode mode) {
  switch (mode) {
    case LoadMode::kSync:
      return "sync";
    case LoadMode::kAsync:
      return "async";
    case LoadMode::kStream:
      return "stream";
  }
  return "?";
}

absl::StatusOr<ArrivalProcess> ParseArrivalProcess(absl::string_view text) {
  if (text == "constant") return ArrivalProcess::kConstant;
  if (text == "poisson") return ArrivalProcess::kPoisson;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown arrival process '", text, "' (expected constant or poisson)"));
}

absl::string_view ArrivalProcessName(ArrivalProcess arrivals) {
  return arrivals == ArrivalProcess::kPoisson ? "poisson" : "constant";
}

bool IsStable(const std::vector<WindowSummary>& windows, double percent) {
  if (static_cast<int>(windows.size()) < kStabilityWindows) return false;
  const auto last = windows.end() - kStabilityWindows;
  auto within = [&](auto value_of) {
    double sum = 0;
    for (auto it = last; it != windows.end(); ++it) sum += value_of(*it);
    const double mean = sum / kStabilityWindows;
    if (mean <= 0) return false;
    for (auto it = last; it != windows.end(); ++it) {
      if (std::abs(value_of(*it) - mean) > percent / 100.0 * mean) return false;
    }
    return true;
  };
  return within([](const WindowSummary& w) { return w.throughput_rps; }) &&
         within([](const WindowSummary& w) { return w.p99_us; });
}

namespace {

using SteadyClock = std::chrono::steady_clock;

absl::Status ValidateOptions(const RunOptions& options) {
  const bool closed = !options.concurrency_levels.empty();
  const bool open = !options.request_rates.empty();
  if (closed == open) {
    return absl::InvalidArgumentError(
        "give either concurrency levels (closed loop) or request rates (open loop), not both");
  }
  if (open && options.mode == LoadMode::kSync) {
    return absl::InvalidArgumentError(
        "open loop (--request-rate) needs --mode async or stream: a blocking call per thread "
        "cannot keep a schedule");
  }
  if (options.make_sync_sender && options.mode != LoadMode::kSync) {
    return absl::InvalidArgumentError(
        "--protocol http sends with one blocking connection per thread: it needs --mode sync "
        "and --concurrency");
  }
  for (int64_t concurrency : options.concurrency_levels) {
    if (concurrency < 1) return absl::InvalidArgumentError("concurrency must be >= 1");
  }
  for (double rate : options.request_rates) {
    if (!(rate > 0) || !std::isfinite(rate)) {
      return absl::InvalidArgumentError("request rate must be > 0");
    }
  }
  if (options.window_ms < 1) return absl::InvalidArgumentError("window must be >= 1 ms");
  if (options.warmup_ms < 0) return absl::InvalidArgumentError("warm-up must be >= 0 ms");
  if (options.max_windows < 1) return absl::InvalidArgumentError("max windows must be >= 1");
  if (options.max_requests < 1) return absl::InvalidArgumentError("max requests must be >= 1");
  if (options.max_duration_ms < 1) return absl::InvalidArgumentError("max duration must be > 0");
  if (options.max_outstanding < 1) {
    return absl::InvalidArgumentError("max outstanding must be >= 1");
  }
  if (options.stability_percent <= 0) {
    return absl::InvalidArgumentError("stability percent must be > 0");
  }
  if (options.batch_size < 1) return absl::InvalidArgumentError("batch size must be >= 1");
  if (options.progress_interval_ms < 1) {
    return absl::InvalidArgumentError("progress interval must be >= 1 ms");
  }
  return absl::OkStatus();
}

LatencySummary Summarize(const LatencyHistogram& histogram) {
  auto us = [](int64_t ns) { return static_cast<double>(ns) / 1e3; };
  LatencySummary s;
  s.mean_us = histogram.mean_ns() / 1e3;
  s.min_us = us(histogram.min_ns());
  s.p50_us = us(histogram.ValueAtPercentile(50));
  s.p90_us = us(histogram.ValueAtPercentile(90));
  s.p95_us = us(histogram.ValueAtPercentile(95));
  s.p99_us = us(histogram.ValueAtPercentile(99));
  s.p999_us = us(histogram.ValueAtPercentile(99.9));
  s.max_us = us(histogram.max_ns());
  return s;
}

// One measured window, kept while it may still be among the reported ones.
struct MeasuredWindow {
  WindowRecord record;
  double duration_s = 0;
  absl::StatusOr<ServerStatsSnapshot> stats_at_start;
  absl::StatusOr<ServerStatsSnapshot> stats_at_end;
};

// The status a window in which nothing succeeded stops the run with.
absl::Status NothingSucceeded(const WindowRecord& record, int window_number, int64_t window_ms) {
  if (record.failed == 0) {
    return absl::DeadlineExceededError(absl::StrCat(
        "no request completed in window ", window_number, " (", window_ms,
        " ms): the server does not answer, or --window-ms is shorter than one request"));
  }
  // The most frequent failure speaks for the window.
  auto worst = std::max_element(record.errors_by_code.begin(), record.errors_by_code.end(),
                                [](const auto& a, const auto& b) { return a.second < b.second; });
  return absl::Status(worst->first, absl::StrCat("every request failed in window ", window_number,
                                                 " (", record.failed, " failures): ",
                                                 absl::StatusCodeToString(worst->first), ": ",
                                                 record.first_error_by_code.at(worst->first)));
}

class LevelRunner {
 public:
  LevelRunner(client::InferenceClient& client,
              std::shared_ptr<const inference::ModelInferRequest> request,
              const RunOptions& options, RequestBudget& budget, SteadyClock::time_point deadline)
      : client_(client),
        request_(std::move(request)),
        options_(options),
        budget_(budget),
        deadline_(deadline) {}

  // Runs level `index`; adds every request's outcome to `totals`. Returns the level's result,
  // and sets `early_stop` (and `aborted` for a failure rather than a limit) when the run must
  // not go on.
  LevelResult Run(int index, RunTotals& totals, absl::Status& early_stop, bool& aborted) {
    const bool closed = !options_.concurrency_levels.empty();
    const int level_count = static_cast<int>(closed ? options_.concurrency_levels.size()
                                                    : options_.request_rates.size());
    LevelResult result;
    Progress progress;
    progress.level_index = index;
    progress.level_count = level_count;
    if (closed) {
      result.concurrency = options_.concurrency_levels[index];
      progress.level_label = absl::StrCat("concurrency ", result.concurrency);
    } else {
      result.request_rate = options_.request_rates[index];
      progress.level_label = absl::StrFormat("rate %g/s", result.request_rate);
    }

    WindowCollector collector;
    GeneratorContext context{&client_,
                             OutgoingRequest{request_, options_.request_tokens},
                             &collector,
                             &budget_,
                             &options_.make_sync_sender,
                             &options_.request_source,
                             &options_.request_variants,
                             options_.seed,
                             &next_send_};
    std::unique_ptr<LoadGenerator> generator =
        closed ? MakeClosedLoop(context, options_.mode, result.concurrency)
               : MakeOpenLoop(context, options_.mode, result.request_rate, options_.arrivals,
                              options_.seed + index, options_.max_outstanding);

    const SteadyClock::time_point level_start = SteadyClock::now();
    generator->Start();
    levels_after_ = level_count - 1 - index;
    level_end_at_most_ =
        level_start +
        std::chrono::milliseconds(options_.warmup_ms + options_.max_windows * options_.window_ms);

    // Warm-up: not measured, but counted in the totals.
    progress.phase = "warm-up";
    WaitUntil(std::min(level_start + std::chrono::milliseconds(options_.warmup_ms), deadline_),
              collector, progress);
    Add(collector.TakeWindow(), totals);

    std::deque<MeasuredWindow> recent;  // the last kStabilityWindows windows
    absl::StatusOr<ServerStatsSnapshot> boundary_stats =
        FetchServerStats(client_, options_.model_name, options_.model_version);
    for (int w = 0; w < options_.max_windows; ++w) {
      const SteadyClock::time_point window_start = SteadyClock::now();
      if (window_start >= deadline_ || budget_.exhausted()) break;
      progress.phase = absl::StrCat("window ", w + 1, "/", options_.max_windows);
      level_end_at_most_ =
          window_start + std::chrono::milliseconds((options_.max_windows - w) * options_.window_ms);
      WaitUntil(std::min(window_start + std::chrono::milliseconds(options_.window_ms), deadline_),
                collector, progress);
      MeasuredWindow window;
      window.record = collector.TakeWindow();
      window.duration_s = std::chrono::duration<double>(SteadyClock::now() - window_start).count();
      window.stats_at_start = std::move(boundary_stats);
      boundary_stats = FetchServerStats(client_, options_.model_name, options_.model_version);
      window.stats_at_end = boundary_stats;
      Add(window.record, totals);

      WindowSummary summary;
      summary.duration_s = window.duration_s;
      summary.succeeded = window.record.succeeded;
      summary.failed = window.record.failed;
      summary.throughput_rps =
          window.duration_s > 0 ? static_cast<double>(window.record.succeeded) / window.duration_s
                                : 0;
      summary.p99_us = static_cast<double>(window.record.latency.ValueAtPercentile(99)) / 1e3;
      result.windows.push_back(summary);
      progress.last_window_rps = summary.throughput_rps;
      progress.last_window_p99_us = summary.p99_us;

      const bool nothing_succeeded = window.record.succeeded == 0;
      if (nothing_succeeded) {
        early_stop = NothingSucceeded(window.record, w + 1, options_.window_ms);
        aborted = true;
      }
      recent.push_back(std::move(window));
      if (static_cast<int>(recent.size()) > kStabilityWindows) recent.pop_front();
      if (nothing_succeeded) {
        result.end_reason = "nothing succeeded";
        break;
      }
      if (IsStable(result.windows, options_.stability_percent)) {
        result.stable = true;
        result.end_reason = "stable";
        break;
      }
    }
    if (result.end_reason.empty()) {
      if (budget_.exhausted()) {
        result.end_reason = "max requests";
        early_stop = absl::ResourceExhaustedError(
            absl::StrCat("stopped after --max-requests=", options_.max_requests, " requests"));
      } else if (SteadyClock::now() >= deadline_) {
        result.end_reason = "max duration";
        early_stop = absl::DeadlineExceededError(absl::StrCat(
            "stopped after --max-duration-s=", options_.max_duration_ms / 1000, " seconds"));
      } else {
        result.end_reason = "max windows";
      }
    }

    progress.phase = "drain";
    Report(progress, collector);
    generator->StopAndDrain(std::chrono::milliseconds(options_.drain_timeout_ms));
    Add(collector.TakeWindow(), totals);

    Aggregate(recent, result);
    return result;
  }

 private:
  // Sleeps until `until`, reporting progress on the way; returns early once the run's request
  // budget is spent (nothing more will be sent).
  void WaitUntil(SteadyClock::time_point until, const WindowCollector& collector,
                 Progress& progress) {
    const auto interval = std::chrono::milliseconds(options_.progress_interval_ms);
    while (true) {
      const SteadyClock::time_point now = SteadyClock::now();
      if (now >= until) return;
      std::this_thread::sleep_until(std::min(until, now + interval));
      Report(progress, collector);
      if (budget_.exhausted()) return;
    }
  }

  void Report(Progress& progress, const WindowCollector& collector) {
    if (!options_.on_progress) return;
    const WindowCollector::Peek peek = collector.PeekCurrent();
    progress.current_succeeded = peek.succeeded;
    progress.current_failed = peek.failed;
    const SteadyClock::time_point now = SteadyClock::now();
    const auto ms = [](SteadyClock::duration d) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
    };
    progress.remaining_at_most_ms = RemainingAtMostMs(ms(level_end_at_most_ - now), levels_after_,
                                                      options_, ms(deadline_ - now));
    options_.on_progress(progress);
  }

  static void Add(const WindowRecord& record, RunTotals& totals) {
    totals.sent += record.sent;
    totals.succeeded += record.succeeded;
    totals.succeeded_tokens += record.succeeded_tokens;
    totals.failed += record.failed;
    totals.sent_late += record.sent_late;
    totals.skipped += record.skipped;
  }

  void Aggregate(const std::deque<MeasuredWindow>& recent, LevelResult& result) const {
    if (recent.empty()) return;
    WindowRecord merged;
    double duration_s = 0;
    for (const MeasuredWindow& window : recent) {
      merged.Merge(window.record);
      duration_s += window.duration_s;
    }
    result.windows_reported = static_cast<int>(recent.size());
    result.duration_s = duration_s;
    result.succeeded = merged.succeeded;
    result.failed = merged.failed;
    result.sent = merged.sent;
    result.sent_late = merged.sent_late;
    result.skipped = merged.skipped;
    if (duration_s > 0) {
      result.throughput_rps = static_cast<double>(merged.succeeded) / duration_s;
      result.sent_rps = static_cast<double>(merged.sent) / duration_s;
    }
    result.inferences_per_s = result.throughput_rps * static_cast<double>(options_.batch_size);
    if (duration_s > 0) {
      result.tokens_per_s = static_cast<double>(merged.succeeded_tokens) / duration_s;
    }
    if (merged.succeeded > 0) {
      result.mean_request_tokens =
          static_cast<double>(merged.succeeded_tokens) / static_cast<double>(merged.succeeded);
    }
    result.latency = Summarize(merged.latency);
    result.failed_latency = Summarize(merged.failed_latency);
    result.errors_by_code = merged.errors_by_code;
    result.first_error_by_code = merged.first_error_by_code;
    const MeasuredWindow& first = recent.front();
    const MeasuredWindow& last = recent.back();
    if (first.stats_at_start.ok() && last.stats_at_end.ok()) {
      result.server = MakeServerBreakdown(last.stats_at_end->Minus(*first.stats_at_start));
    }
  }

  client::InferenceClient& client_;
  const std::shared_ptr<const inference::ModelInferRequest> request_;
  const RunOptions& options_;
  RequestBudget& budget_;
  const SteadyClock::time_point deadline_;
  // For Progress::remaining_at_most_ms: when the current level ends at the latest, and how many
  // levels follow it. Only RunLoad's thread touches them.
  SteadyClock::time_point level_end_at_most_{};
  int levels_after_ = 0;
  std::atomic<uint64_t> next_send_{0};
};

}  // namespace

int64_t RemainingAtMostMs(int64_t level_left_ms, int levels_after, const RunOptions& options,
                          int64_t deadline_left_ms) {
  const int64_t per_level = options.warmup_ms + options.max_windows * options.window_ms;
  const int64_t planned =
      std::max<int64_t>(level_left_ms, 0) + std::max(levels_after, 0) * per_level;
  return std::min(planned, std::max<int64_t>(deadline_left_ms, 0));
}

std::string FormatProgressLine(const Progress& p) {
  std::string line =
      absl::StrFormat("[%d/%d] %s, %s: %d ok, %d failed", p.level_index + 1, p.level_count,
                      p.level_label, p.phase, p.current_succeeded, p.current_failed);
  if (p.last_window_rps > 0) {
    absl::StrAppendFormat(&line, " | last window %.1f req/s, p99 %.3f ms", p.last_window_rps,
                          p.last_window_p99_us / 1e3);
  }
  if (p.remaining_at_most_ms >= 0) {
    // An upper bound, said as one: levels usually turn stable before --max-windows.
    const int64_t s = (p.remaining_at_most_ms + 999) / 1000;
    if (s >= 3600) {
      absl::StrAppendFormat(&line, " | ETA <= %dh%02dm", s / 3600, s % 3600 / 60);
    } else if (s >= 60) {
      absl::StrAppendFormat(&line, " | ETA <= %dm%02ds", s / 60, s % 60);
    } else {
      absl::StrAppendFormat(&line, " | ETA <= %ds", s);
    }
  }
  return line;
}

absl::StatusOr<RunResult> RunLoad(client::InferenceClient& client,
                                  std::shared_ptr<const inference::ModelInferRequest> request,
                                  const RunOptions& options) {
  if (request == nullptr) return absl::InvalidArgumentError("no request to send");
  if (absl::Status valid = ValidateOptions(options); !valid.ok()) return valid;

  const SteadyClock::time_point start = SteadyClock::now();
  const SteadyClock::time_point deadline =
      start + std::chrono::milliseconds(options.max_duration_ms);
  RequestBudget budget(options.max_requests);
  LevelRunner runner(client, std::move(request), options, budget, deadline);

  RunResult result;
  const int level_count =
      static_cast<int>(options.concurrency_levels.empty() ? options.request_rates.size()
                                                          : options.concurrency_levels.size());
  for (int i = 0; i < level_count; ++i) {
    if (SteadyClock::now() >= deadline) {
      result.early_stop = absl::DeadlineExceededError(
          absl::StrCat("stopped after --max-duration-s=", options.max_duration_ms / 1000,
                       " seconds; ", level_count - i, " level(s) not run"));
      break;
    }
    if (budget.exhausted()) {
      result.early_stop = absl::ResourceExhaustedError(
          absl::StrCat("stopped after --max-requests=", options.max_requests, " requests; ",
                       level_count - i, " level(s) not run"));
      break;
    }
    result.levels.push_back(runner.Run(i, result.totals, result.early_stop, result.aborted));
    if (!result.early_stop.ok()) {
      if (i + 1 < level_count) {
        result.early_stop = absl::Status(result.early_stop.code(),
                                         absl::StrCat(result.early_stop.message(), "; ",
                                                      level_count - i - 1, " level(s) not run"));
      }
      break;
    }
  }
  result.totals.duration_s = std::chrono::duration<double>(SteadyClock::now() - start).count();
  return result;
}

}  // namespace sluice::loadtest
