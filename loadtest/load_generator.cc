#include "loadtest/load_generator.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/random_input.h"
#include "common/check.h"

namespace sluice::loadtest {

OutgoingRequest GeneratorContext::Pick() const {
  const bool has_source = source != nullptr && *source;
  const bool has_variants = variants != nullptr && !variants->empty();
  if (!has_source && !has_variants) return request;
  const uint64_t index = next_send->fetch_add(1, std::memory_order_relaxed);
  if (has_source) return (*source)(index);
  const client::LengthRange choices{1, static_cast<int64_t>(variants->size())};
  return {(*variants)[static_cast<size_t>(client::DrawLength(choices, seed, index) - 1)], 0};
}

namespace {

using SteadyClock = std::chrono::steady_clock;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch())
      .count();
}

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

}  // namespace

std::unique_ptr<LoadGenerator> MakeClosedLoop(GeneratorContext context, LoadMode mode,
                                              int64_t concurrency) {
  if (mode == LoadMode::kSync) {
    return std::make_unique<SyncClosedLoop>(std::move(context), concurrency);
  }
  if (mode == LoadMode::kAsync) {
    return std::make_unique<AsyncClosedLoop>(std::move(context), concurrency);
  }
  return std::make_unique<StreamLoad>(std::move(context), concurrency, /*closed_loop=*/true);
}

std::unique_ptr<LoadGenerator> MakeOpenLoop(GeneratorContext context, LoadMode mode, double rate,
                                            ArrivalProcess arrivals, uint64_t seed,
                                            int64_t max_outstanding) {
  return std::make_unique<OpenLoop>(std::move(context), mode, rate, arrivals, seed,
                                    max_outstanding);
}

}  // namespace sluice::loadtest
