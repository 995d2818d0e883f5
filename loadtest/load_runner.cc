#include "loadtest/load_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <random>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/random_input.h"
#include "common/check.h"
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

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch())
      .count();
}

// The run's request allowance, shared by every sender. Lock-free.
class RequestBudget {
 public:
  explicit RequestBudget(int64_t requests) : remaining_(requests) {}
  // Takes one request from the budget; false once it is spent.
  bool TryTake() { return remaining_.fetch_sub(1, std::memory_order_relaxed) > 0; }
  bool exhausted() const { return remaining_.load(std::memory_order_relaxed) <= 0; }

 private:
  std::atomic<int64_t> remaining_;
};

// A load generator for one level. Start() begins sending; StopAndDrain() stops sending and waits
// (bounded) until every request it sent has been answered, failed or been cancelled, and
// recorded. Both are called from the measurement thread, once each, in that order; the
// destructor requires StopAndDrain() to have returned if Start() was called.
class LoadGenerator {
 public:
  virtual ~LoadGenerator() = default;
  virtual void Start() = 0;
  virtual void StopAndDrain(std::chrono::milliseconds timeout) = 0;
};

// Everything a generator borrows; all outlive it.
struct GeneratorContext {
  client::InferenceClient* client;
  OutgoingRequest request;
  WindowCollector* collector;
  RequestBudget* budget;
  // RunOptions::make_sync_sender; null or empty: gRPC.
  const std::function<absl::StatusOr<std::function<absl::Status()>>()>* make_sync_sender = nullptr;
  // RunOptions::request_source; null or empty: none.
  const std::function<OutgoingRequest(uint64_t)>* source = nullptr;
  // RunOptions::request_variants; null or empty: always `request`.
  const std::vector<std::shared_ptr<const inference::ModelInferRequest>>* variants = nullptr;
  uint64_t seed = 0;
  // The number of the next send, across the run's levels and threads.
  std::atomic<uint64_t>* next_send = nullptr;

  // The request to send next: `request`, or the source's or a variant chosen by the send's
  // number.
  OutgoingRequest Pick() const {
    const bool has_source = source != nullptr && *source;
    const bool has_variants = variants != nullptr && !variants->empty();
    if (!has_source && !has_variants) return request;
    const uint64_t index = next_send->fetch_add(1, std::memory_order_relaxed);
    if (has_source) return (*source)(index);
    const client::LengthRange choices{1, static_cast<int64_t>(variants->size())};
    return {(*variants)[static_cast<size_t>(client::DrawLength(choices, seed, index) - 1)], 0};
  }
};

// Closed loop, LoadMode::kSync: `concurrency` threads, each sending with the blocking Infer().
// Stopping waits for each thread's current call (bounded by the client's per-call deadline).
class SyncClosedLoop final : public LoadGenerator {
 public:
  SyncClosedLoop(GeneratorContext context, int64_t concurrency)
      : context_(std::move(context)), concurrency_(concurrency) {}
  ~SyncClosedLoop() override { CHECK(threads_.empty()); }

  void Start() override {
    for (int64_t i = 0; i < concurrency_; ++i) threads_.emplace_back([this] { Loop(); });
  }

  void StopAndDrain(std::chrono::milliseconds /*timeout*/) override {
    stop_.store(true, std::memory_order_relaxed);
    for (std::thread& thread : threads_) thread.join();
    threads_.clear();
  }

 private:
  void Loop() {
    std::function<absl::Status()> send;  // HTTP; empty: gRPC
    if (context_.make_sync_sender != nullptr && *context_.make_sync_sender) {
      absl::StatusOr<std::function<absl::Status()>> made = (*context_.make_sync_sender)();
      if (!made.ok()) {
        context_.collector->RecordSent();
        context_.collector->RecordResult(made.status(), 0);
        return;
      }
      send = *std::move(made);
    }
    while (!stop_.load(std::memory_order_relaxed) && context_.budget->TryTake()) {
      context_.collector->RecordSent();
      const int64_t start_ns = NowNs();
      if (send) {
        const absl::Status status = send();
        context_.collector->RecordResult(status, NowNs() - start_ns, context_.request.tokens);
      } else {
        const OutgoingRequest outgoing = context_.Pick();
        client::InferResult result = context_.client->Infer(*outgoing.request);
        context_.collector->RecordResult(result.status(), NowNs() - start_ns, outgoing.tokens);
      }
    }
  }

  const GeneratorContext context_;
  const int64_t concurrency_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// Closed loop, LoadMode::kAsync: `concurrency` chains of AsyncInfer; each callback records its
// answer and sends the next request (the client allows this; it does not block).
class AsyncClosedLoop final : public LoadGenerator {
 public:
  AsyncClosedLoop(GeneratorContext context, int64_t concurrency)
      : context_(std::move(context)), concurrency_(concurrency) {}

  void Start() override {
    for (int64_t i = 0; i < concurrency_; ++i) SendNext();
  }

  // Waits for every async call of the client; each is bounded by the client's deadline.
  void StopAndDrain(std::chrono::milliseconds /*timeout*/) override {
    stop_.store(true, std::memory_order_relaxed);
    context_.client->WaitForAsync();
  }

 private:
  void SendNext() {
    if (stop_.load(std::memory_order_relaxed) || !context_.budget->TryTake()) return;
    context_.collector->RecordSent();
    OutgoingRequest outgoing = context_.Pick();
    const int64_t start_ns = NowNs();
    context_.client->AsyncInfer(
        std::move(outgoing.request),
        [this, start_ns, tokens = outgoing.tokens](client::InferResult result) {
          context_.collector->RecordResult(result.status(), NowNs() - start_ns, tokens);
          SendNext();
        });
  }

  const GeneratorContext context_;
  const int64_t concurrency_;
  std::atomic<bool> stop_{false};
};

// LoadMode::kStream: one ModelStreamInfer stream with up to `slots` requests in flight. Each
// request carries its slot number as its id, which the answer echoes; the slot keeps the send
// time. Closed loop: every slot is kept busy (an answer resends on its slot). Open loop: the
// scheduler calls TrySend(), which takes a free slot or reports that none is free.
class StreamLoad final : public LoadGenerator {
 public:
  StreamLoad(GeneratorContext context, int64_t slots, bool closed_loop)
      : context_(std::move(context)),
        slot_count_(slots),
        closed_loop_(closed_loop),
        send_ns_(new std::atomic<int64_t>[slots]),
        tokens_(new std::atomic<int64_t>[slots]) {
    ids_.reserve(slots);
    for (int64_t i = 0; i < slots; ++i) {
      ids_.push_back(absl::StrCat(i));
      send_ns_[i].store(0, std::memory_order_relaxed);
      tokens_[i].store(0, std::memory_order_relaxed);
      if (!closed_loop_) free_slots_.push_back(i);
    }
  }
  ~StreamLoad() override { CHECK(stream_ == nullptr); }

  void Start() override {
    absl::StatusOr<std::unique_ptr<client::InferStream>> stream =
        context_.client->StartStream([this](client::InferResult result) { OnAnswer(result); });
    CHECK(stream.ok());  // fails only for an empty callback
    stream_ = *std::move(stream);
    if (closed_loop_) {
      for (int64_t slot = 0; slot < slot_count_; ++slot) {
        {
          absl::MutexLock lock(&mu_);
          if (!context_.budget->TryTake()) break;
          ++outstanding_;
        }
        Send(slot);
      }
    }
  }

  // Open loop: sends on a free slot; false (nothing sent) if every slot is busy.
  // REQUIRES: the caller took the request from the budget.
  bool TrySend() {
    int64_t slot = -1;
    {
      absl::MutexLock lock(&mu_);
      if (free_slots_.empty()) return false;
      slot = free_slots_.back();
      free_slots_.pop_back();
      ++outstanding_;
    }
    Send(slot);
    return true;
  }

  bool HasFreeSlot() {
    absl::MutexLock lock(&mu_);
    return !free_slots_.empty();
  }

  void StopAndDrain(std::chrono::milliseconds timeout) override {
    bool drained = false;
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;  // from here on no answer sends a new request
      auto nothing_outstanding = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return outstanding_ == 0;
      };
      drained =
          mu_.AwaitWithTimeout(absl::Condition(&nothing_outstanding), absl::FromChrono(timeout));
    }
    if (!drained) stream_->Cancel();  // give up on the rest: Finish() then returns CANCELLED
    absl::Status stream_status = stream_->Finish();  // no callback runs after this returns
    int64_t lost = 0;
    int64_t failed_writes = 0;
    {
      absl::MutexLock lock(&mu_);
      lost = outstanding_;
      failed_writes = failed_writes_;
      outstanding_ = 0;
    }
    if (lost + failed_writes > 0) {
      const absl::Status status =
          stream_status.ok() ? absl::CancelledError("stream ended before answering the request")
                             : stream_status;
      for (int64_t i = 0; i < lost + failed_writes; ++i) {
        context_.collector->RecordResult(status, 0);
      }
    }
    stream_.reset();
  }

 private:
  // Sends the request on `slot`, which the caller owns until its answer.
  // REQUIRES: the caller counted the request in outstanding_ (under mu_, in the same critical
  // section that checked stopping_ or took the slot), so that a drain never sees zero in between.
  void Send(int64_t slot) {
    const OutgoingRequest outgoing = context_.Pick();
    inference::ModelInferRequest request = *outgoing.request;
    request.set_id(ids_[slot]);
    tokens_[slot].store(outgoing.tokens, std::memory_order_relaxed);
    send_ns_[slot].store(NowNs(), std::memory_order_release);
    absl::Status written = stream_->Write(std::move(request));
    if (written.ok()) {
      context_.collector->RecordSent();
      return;
    }
    // The stream has ended; its status (from Finish) is what the request failed with, unless we
    // are stopping (the drain timed out and cancelled the stream: nothing was lost).
    absl::MutexLock lock(&mu_);
    --outstanding_;
    if (!stopping_) ++failed_writes_;
    if (!closed_loop_) free_slots_.push_back(slot);
  }

  void OnAnswer(const client::InferResult& result) {
    const int64_t now_ns = NowNs();
    const std::string id = result.ok() ? result->id() : client::RequestIdOf(result.status());
    int64_t slot = -1;
    if (!absl::SimpleAtoi(id, &slot) || slot < 0 || slot >= slot_count_) {
      // Not an answer we can match to a request: count it, and leave its slot busy (the drain
      // then times out and cancels the stream rather than miscount).
      context_.collector->RecordResult(
          result.ok()
              ? absl::InternalError(absl::StrCat("stream answer with unknown id '", id, "'"))
              : result.status(),
          0);
      return;
    }
    context_.collector->RecordResult(result.status(),
                                     now_ns - send_ns_[slot].load(std::memory_order_acquire),
                                     tokens_[slot].load(std::memory_order_relaxed));
    if (closed_loop_) {
      bool resend = false;
      {
        // The answered request's count passes to its successor, if there is one.
        absl::MutexLock lock(&mu_);
        resend = !stopping_ && context_.budget->TryTake();
        if (!resend) --outstanding_;
      }
      if (resend) Send(slot);
      return;
    }
    absl::MutexLock lock(&mu_);
    --outstanding_;
    free_slots_.push_back(slot);
  }

  const GeneratorContext context_;
  const int64_t slot_count_;
  const bool closed_loop_;
  std::vector<std::string> ids_;                     // slot -> request id
  std::unique_ptr<std::atomic<int64_t>[]> send_ns_;  // slot -> send time
  std::unique_ptr<std::atomic<int64_t>[]> tokens_;   // slot -> tokens of its request
  std::unique_ptr<client::InferStream> stream_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failed_writes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> free_slots_ ABSL_GUARDED_BY(mu_);  // open loop only
};

// Open loop: one scheduler thread sends at `rate` per second (constant gaps, or exponential gaps
// for Poisson arrivals) through AsyncInfer or a stream, whatever the answers, with at most
// `max_outstanding` requests in flight.
class OpenLoop final : public LoadGenerator {
 public:
  OpenLoop(GeneratorContext context, LoadMode mode, double rate, ArrivalProcess arrivals,
           uint64_t seed, int64_t max_outstanding)
      : context_(std::move(context)),
        mode_(mode),
        rate_(rate),
        arrivals_(arrivals),
        seed_(seed),
        max_outstanding_(max_outstanding) {
    if (mode_ == LoadMode::kStream) {
      stream_ = std::make_unique<StreamLoad>(context_, max_outstanding_, /*closed_loop=*/false);
    }
  }
  ~OpenLoop() override { CHECK(!scheduler_.joinable()); }

  void Start() override {
    if (stream_ != nullptr) stream_->Start();
    scheduler_ = std::thread([this] { Schedule(); });
  }

  void StopAndDrain(std::chrono::milliseconds timeout) override {
    stop_.Notify();
    scheduler_.join();
    if (stream_ != nullptr) {
      stream_->StopAndDrain(timeout);
    } else {
      context_.client->WaitForAsync();  // each call is bounded by the client's deadline
    }
  }

 private:
  void Schedule() {
    std::mt19937_64 random(seed_);
    std::exponential_distribution<double> gap_s(rate_);
    const SteadyClock::time_point start = SteadyClock::now();
    // Scheduled send times are computed from `start` (not from the previous send) so that a late
    // wake-up does not lower the rate: the scheduler catches up.
    double offset_s = 0;
    for (int64_t i = 0;; ++i) {
      offset_s = arrivals_ == ArrivalProcess::kPoisson ? offset_s + gap_s(random)
                                                       : static_cast<double>(i) / rate_;
      const SteadyClock::time_point scheduled =
          start + std::chrono::duration_cast<SteadyClock::duration>(
                      std::chrono::duration<double>(offset_s));
      if (stop_.WaitForNotificationWithTimeout(absl::FromChrono(scheduled - SteadyClock::now()))) {
        return;
      }
      if (!HasRoom()) {
        context_.collector->RecordSkipped();
        continue;
      }
      if (!context_.budget->TryTake()) {
        stop_.WaitForNotification();  // the run's budget is spent: send nothing more
        return;
      }
      const bool late =
          SteadyClock::now() - scheduled > std::chrono::microseconds(kLateThresholdUs);
      if (!Send()) {
        context_.collector->RecordSkipped();
        continue;
      }
      if (late) context_.collector->RecordSentLate();
    }
  }

  bool HasRoom() {
    if (stream_ != nullptr) return stream_->HasFreeSlot();
    return outstanding_.load(std::memory_order_relaxed) < max_outstanding_;
  }

  // False if the cap was reached meanwhile (nothing sent).
  bool Send() {
    if (stream_ != nullptr) return stream_->TrySend();
    outstanding_.fetch_add(1, std::memory_order_relaxed);
    context_.collector->RecordSent();
    OutgoingRequest outgoing = context_.Pick();
    const int64_t start_ns = NowNs();
    context_.client->AsyncInfer(
        std::move(outgoing.request),
        [this, start_ns, tokens = outgoing.tokens](client::InferResult result) {
          context_.collector->RecordResult(result.status(), NowNs() - start_ns, tokens);
          outstanding_.fetch_sub(1, std::memory_order_relaxed);
        });
    return true;
  }

  const GeneratorContext context_;
  const LoadMode mode_;
  const double rate_;
  const ArrivalProcess arrivals_;
  const uint64_t seed_;
  const int64_t max_outstanding_;
  std::unique_ptr<StreamLoad> stream_;   // kStream only
  std::atomic<int64_t> outstanding_{0};  // kAsync only
  absl::Notification stop_;
  std::thread scheduler_;
};

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
    std::unique_ptr<LoadGenerator> generator;
    if (!closed) {
      generator =
          std::make_unique<OpenLoop>(context, options_.mode, result.request_rate, options_.arrivals,
                                     options_.seed + index, options_.max_outstanding);
    } else if (options_.mode == LoadMode::kSync) {
      generator = std::make_unique<SyncClosedLoop>(context, result.concurrency);
    } else if (options_.mode == LoadMode::kAsync) {
      generator = std::make_unique<AsyncClosedLoop>(context, result.concurrency);
    } else {
      generator = std::make_unique<StreamLoad>(context, result.concurrency, /*closed_loop=*/true);
    }

    const SteadyClock::time_point level_start = SteadyClock::now();
    generator->Start();

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
  std::atomic<uint64_t> next_send_{0};
};

}  // namespace

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
