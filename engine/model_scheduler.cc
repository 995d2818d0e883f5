#include "engine/model_scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "engine/core/model_stats.h"

namespace sluice::engine {

absl::StatusOr<std::unique_ptr<ModelScheduler>> ModelScheduler::Create(const ModelConfig& config,
                                                                       SchedulerOptions options) {
  if (options.clock == nullptr || options.stats == nullptr) {
    return absl::InvalidArgumentError("ModelScheduler needs a clock and stats");
  }
  if (options.priority_levels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", config.name, "': ", options.priority_levels, " priority levels"));
  }
  if (options.default_priority_level < 1 ||
      options.default_priority_level > options.priority_levels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", config.name, "': default priority level ", options.default_priority_level,
        " is outside [1, ", options.priority_levels, "]"));
  }
  if (options.queue_policy.max_queue_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("model '", config.name, "': max queue size ",
                                                   options.queue_policy.max_queue_size, " is < 1"));
  }
  for (const auto& [level, policy] : options.level_policies) {
    if (level < 1 || level > options.priority_levels) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", config.name, "': a policy for level ", level, ", outside [1, ",
                       options.priority_levels, "]"));
    }
    if (policy.max_queue_size < 1) {
      return absl::InvalidArgumentError(absl::StrCat("model '", config.name, "': max queue size ",
                                                     policy.max_queue_size, " of level ", level,
                                                     " is < 1"));
    }
  }
  return std::unique_ptr<ModelScheduler>(new ModelScheduler(config, std::move(options)));
}

ModelScheduler::ModelScheduler(const ModelConfig& config, SchedulerOptions options)
    : config_(config), options_(std::move(options)) {
  for (const TensorSpec& input : config_.inputs) {
    for (int64_t dim : input.dims) any_shapes_batch_ = any_shapes_batch_ && dim >= 0;
  }
  // A ragged model's backend packs sequences of any length into one batch.
  if (config_.ragged_batching.has_value()) any_shapes_batch_ = true;
  // Built in place: a deque of move-only entries cannot be copied, and its move may throw.
  levels_ = std::vector<Level>(static_cast<size_t>(options_.priority_levels));
  for (size_t i = 0; i < levels_.size(); ++i) {
    auto own = options_.level_policies.find(static_cast<int>(i) + 1);
    levels_[i].policy = own != options_.level_policies.end() ? own->second : options_.queue_policy;
  }
  default_level_ = static_cast<size_t>(options_.default_priority_level - 1);
}

size_t ModelScheduler::LevelIndex(uint64_t priority) const {
  // As Triton: 0, or a level the model does not have, means the default level.
  if (priority == 0 || priority > levels_.size()) return default_level_;
  return static_cast<size_t>(priority - 1);
}

std::vector<ModelScheduler::Entry> ModelScheduler::TakeAllLocked() {
  std::vector<Entry> all;
  all.reserve(static_cast<size_t>(queued_));
  for (Level& level : levels_) {
    for (Entry& entry : level.queue) all.push_back(std::move(entry));
    level.queue.clear();
  }
  queued_ = 0;
  return all;
}

ModelScheduler::~ModelScheduler() { Stop(); }

void ModelScheduler::Start(std::vector<std::unique_ptr<Executor>> executors) {
  CHECK(!executors.empty());
  common::MutexLock lock(&mu_);
  CHECK(!started_);
  executors_ = std::move(executors);
  started_ = true;
  batcher_ = std::thread([this] { BatcherLoop(); });
}

void ModelScheduler::Enqueue(std::unique_ptr<InferenceRequest> request) {
  absl::Status rejection;
  bool dispatched = false;
  {
    common::MutexLock lock(&mu_);
    if (!failure_.ok()) {
      rejection = failure_;
    } else if (stopping_) {
      rejection = absl::UnavailableError(
          absl::StrCat("model '", config_.name, "' is unloading or the server is shutting down"));
    } else if (Level& level = levels_[LevelIndex(request->priority)];
               static_cast<int64_t>(level.queue.size()) >= level.policy.max_queue_size) {
      rejection = absl::ResourceExhaustedError(absl::StrCat(
          "model '", config_.name, "' queue is full (", level.policy.max_queue_size,
          " requests waiting",
          levels_.size() > 1 ? absl::StrCat(" at priority level ", &level - levels_.data() + 1)
                             : std::string(),
          "); retry later"));
    } else if (const auto now = options_.clock->Now(); TryDispatchAloneLocked(request, now)) {
      dispatched = true;
    } else {
      request->enqueue_time = now;
      auto expires_at = common::Clock::TimePoint::max();
      std::chrono::microseconds timeout = level.policy.default_timeout;
      if (level.policy.allow_timeout_override && request->timeout.has_value()) {
        timeout = *request->timeout;
      }
      if (timeout.count() > 0) expires_at = now + timeout;
      if (request->deadline.has_value()) expires_at = std::min(expires_at, *request->deadline);
      if (expires_at != common::Clock::TimePoint::max()) {
        ++entries_with_deadline_;
        earliest_expiry_ = std::min(earliest_expiry_, expires_at);
      }
      if (request->cancelled != nullptr) {
        if (entries_cancellable_++ == 0) next_cancel_sweep_ = now + kCancelSweepPeriod;
      }
      level.queue.push_back(Entry{std::move(request), expires_at});
      ++queued_;
      ++wake_generation_;
    }
  }
  if (!rejection.ok()) {
    options_.stats->RecordFailure(*request, rejection.code());
    request->Complete(std::move(rejection));
    return;
  }
  // A request dispatched here needs no batcher; DispatchLocked() woke it if others queued
  // meanwhile.
  if (!dispatched) cv_.Signal();
}

bool ModelScheduler::TryDispatchAloneLocked(std::unique_ptr<InferenceRequest>& request,
                                            common::Clock::TimePoint now) {
  // Only with nothing queued (queue order and priorities stay the batcher's), nobody else
  // dispatching (the slot found stays free), and a request that may still run.
  if (!started_ || queued_ > 0 || dispatching_ > 0 || request->IsCancelled() ||
      (request->deadline.has_value() && *request->deadline <= now)) {
    return false;
  }
  bool idle = false;
  const int executor = PickExecutor(&idle);
  if (executor < 0 || !executors_[executor]->ExecuteOnlyEnqueues()) return false;
  const PendingRequest alone[] = {
      {.batch_size = request->batch_size, .enqueue_time = now, .tokens = request->token_count}};
  if (DecideBatch(options_.policy, alone, /*more_incompatible=*/false, idle, now).request_count !=
      1) {
    return false;  // the policy lets it wait for company: the batcher's job
  }
  request->enqueue_time = now;
  Batch batch;
  batch.dispatch_time = now;
  batch.items = request->batch_size;
  batch.tokens = request->token_count;
  batch.requests.push_back(std::move(request));
  DispatchLocked(executor, std::move(batch));
  // Requests that arrived while the lock was released found dispatching_ > 0 and were queued;
  // the batcher, which may have seen them and waited for this dispatch, takes them now.
  if (queued_ > 0) cv_.Signal();
  return true;
}

void ModelScheduler::DispatchLocked(int executor, Batch batch) {
  ++dispatching_;
  dispatch_runs_batch_ = executors_[executor]->ExecuteRunsBatch();
  mu_.Unlock();
  if (config_.ragged_batching.has_value()) options_.stats->RecordBatchTokens(batch.tokens);
  executors_[executor]->Execute(std::move(batch));
  mu_.Lock();
  --dispatching_;
  dispatch_runs_batch_ = false;
  dispatched_cv_.SignalAll();
}

void ModelScheduler::NotifySlotFreed() {
  // Taking the lock orders this notify after the batcher's predicate check (no lost wake-up).
  {
    common::MutexLock lock(&mu_);
    ++wake_generation_;
  }
  cv_.Signal();
}

void ModelScheduler::Fail(absl::Status reason) {
  CHECK(!reason.ok());
  {
    common::MutexLock lock(&mu_);
    if (!failure_.ok()) return;
    failure_ = std::move(reason);
    ++wake_generation_;
  }
  cv_.SignalAll();
}

bool ModelScheduler::WaitUntilBatcherSleepsForTest(std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  common::MutexLock lock(&mu_);
  const uint64_t target = wake_generation_;
  while (slept_generation_ < target) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    slept_cv_.WaitFor(&mu_, std::chrono::milliseconds(10));
  }
  return true;
}

int64_t ModelScheduler::QueueDepth() const {
  common::MutexLock lock(&mu_);
  return queued_;
}

bool ModelScheduler::Idle() const {
  common::MutexLock lock(&mu_);
  // A batch being handed over is about to be in flight: wait for Execute() to return (it is
  // bounded) rather than answer "busy" for a batch the executor may already have finished. A
  // batch that Execute() runs to its answers (on the batcher thread) is simply busy: waiting for
  // it would block the caller for a model run.
  while (dispatching_ > 0) {
    if (dispatch_runs_batch_) return false;
    dispatched_cv_.Wait(&mu_);
  }
  if (queued_ > 0) return false;
  for (const auto& executor : executors_) {
    if (executor->InFlight() > 0) return false;
  }
  return true;
}

void ModelScheduler::Stop() {
  std::lock_guard<std::mutex> stop_lock(stop_mu_);
  {
    common::MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  if (batcher_.joinable()) batcher_.join();
  {
    // An RPC thread may still be inside Enqueue's dispatch shortcut: its Execute() comes first.
    common::MutexLock lock(&mu_);
    while (dispatching_ > 0) dispatched_cv_.Wait(&mu_);
  }
  for (auto& executor : executors_) executor->Stop();
  // Never started: answer whatever was queued.
  std::vector<Entry> left;
  {
    common::MutexLock lock(&mu_);
    left = TakeAllLocked();
  }
  for (Entry& entry : left) {
    entry.request->Complete(absl::UnavailableError(
        absl::StrCat("model '", config_.name, "' stopped before the request ran")));
  }
}

int ModelScheduler::PickExecutor(bool* idle) const {
  const size_t n = executors_.size();
  int with_slot = -1;
  for (size_t i = 0; i < n; ++i) {
    const size_t index = (next_executor_ + i) % n;
    const Executor& executor = *executors_[index];
    if (!executor.HasFreeSlot()) continue;
    if (executor.InFlight() == 0) {
      next_executor_ = index + 1;
      *idle = true;
      return static_cast<int>(index);
    }
    if (with_slot < 0) with_slot = static_cast<int>(index);
  }
  *idle = false;
  if (with_slot >= 0) next_executor_ = static_cast<size_t>(with_slot) + 1;
  return with_slot;
}

bool ModelScheduler::Compatible(const InferenceRequest& a, const InferenceRequest& b) const {
  if (any_shapes_batch_) return true;
  // Models with optional inputs (the encoder's attention_mask) bind requests with fewer inputs.
  if (a.inputs.size() != b.inputs.size()) return false;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const Shape& sa = a.inputs[i].shape;
    const Shape& sb = b.inputs[i].shape;
    if (sa.size() != sb.size() || !std::equal(sa.begin() + 1, sa.end(), sb.begin() + 1)) {
      return false;
    }
  }
  return true;
}

void ModelScheduler::ForgetLocked(const Entry& entry) {
  if (entry.expires_at != common::Clock::TimePoint::max()) --entries_with_deadline_;
  if (entry.request->cancelled != nullptr) --entries_cancellable_;
}

void ModelScheduler::SweepLocked(
    common::Clock::TimePoint now,
    std::vector<std::pair<std::unique_ptr<InferenceRequest>, absl::StatusCode>>& out) {
  earliest_expiry_ = common::Clock::TimePoint::max();
  for (Level& level : levels_) {
    std::deque<Entry>& queue = level.queue;
    for (auto it = queue.begin(); it != queue.end();) {
      absl::StatusCode code = absl::StatusCode::kOk;
      if (it->expires_at <= now) {
        code = absl::StatusCode::kDeadlineExceeded;
      } else if (it->request->IsCancelled()) {
        code = absl::StatusCode::kCancelled;
      }
      if (code == absl::StatusCode::kOk) {
        earliest_expiry_ = std::min(earliest_expiry_, it->expires_at);
        ++it;
        continue;
      }
      ForgetLocked(*it);
      out.emplace_back(std::move(it->request), code);
      it = queue.erase(it);
      --queued_;
    }
  }
  next_cancel_sweep_ = now + kCancelSweepPeriod;
}

void ModelScheduler::AnswerSwept(
    std::vector<std::pair<std::unique_ptr<InferenceRequest>, absl::StatusCode>>& swept) {
  for (auto& [request, code] : swept) {
    options_.stats->RecordFailure(*request, code);
    if (code == absl::StatusCode::kCancelled) {
      request->Complete(absl::CancelledError(absl::StrCat(
          "request cancelled by the client while queued for model '", config_.name, "'")));
    } else {
      request->Complete(absl::DeadlineExceededError(absl::StrCat(
          "request timed out in the queue of model '", config_.name, "' before it ran")));
    }
  }
  swept.clear();
}

void ModelScheduler::BatcherLoop() {
  std::vector<PendingRequest> pending;
  std::vector<std::pair<std::unique_ptr<InferenceRequest>, absl::StatusCode>> swept;
  mu_.Lock();
  for (;;) {
    const auto now = options_.clock->Now();
    // Everything notified up to here is seen by this pass (WaitUntilBatcherSleepsForTest).
    const uint64_t generation = wake_generation_;
    auto sleeping = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      slept_generation_ = generation;
      slept_cv_.SignalAll();
    };

    // 1. Requests whose deadline passed, or whose client cancelled, leave the queue before they
    // can be batched. The queue is walked only when a deadline is due or a cancel sweep is: not
    // once per batch, which would cost O(queue) per batch under load.
    const bool deadline_due = entries_with_deadline_ > 0 && now >= earliest_expiry_;
    const bool cancel_sweep_due = entries_cancellable_ > 0 && now >= next_cancel_sweep_;
    if (deadline_due || cancel_sweep_due) SweepLocked(now, swept);
    if (!swept.empty()) {
      mu_.Unlock();
      AnswerSwept(swept);
      mu_.Lock();
      continue;
    }
    auto next_expiry =
        entries_with_deadline_ > 0 ? earliest_expiry_ : common::Clock::TimePoint::max();
    if (entries_cancellable_ > 0) next_expiry = std::min(next_expiry, next_cancel_sweep_);

    // A failed model runs nothing more: what waits is answered with the failure, not lost.
    if (!failure_.ok() && queued_ > 0) {
      std::vector<Entry> failed = TakeAllLocked();
      for (const Entry& entry : failed) ForgetLocked(entry);
      const absl::Status failure = failure_;
      mu_.Unlock();
      for (Entry& entry : failed) {
        options_.stats->RecordFailure(*entry.request, failure.code());
        entry.request->Complete(failure);
      }
      mu_.Lock();
      continue;
    }

    if (queued_ == 0) {
      if (stopping_) {
        mu_.Unlock();
        return;
      }
      sleeping();
      cv_.Wait(&mu_);
      continue;
    }

    // Waits until `when` (in the scheduler clock's time) or a notification.
    auto wait_until = [&](common::Clock::TimePoint when) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      sleeping();
      if (when == common::Clock::TimePoint::max()) {
        cv_.Wait(&mu_);
      } else {
        cv_.WaitFor(&mu_, std::max(when - now, std::chrono::steady_clock::duration::zero()));
      }
    };

    // An RPC thread is handing a request over (Enqueue's shortcut): the slot it found must stay
    // free until its Execute() returns; it wakes this thread when done if requests queued.
    if (dispatching_ > 0) {
      wait_until(next_expiry);
      continue;
    }
    bool idle = false;
    const int executor = PickExecutor(&idle);
    if (executor < 0) {
      wait_until(next_expiry);
      continue;
    }

    // 2. The first queued requests in service order (level 1 first, arrival order within a
    // level) that may share a batch with the first one. One candidate more than a batch can hold
    // tells whether an incompatible request waits behind them.
    const size_t max_requests = static_cast<size_t>(std::max(options_.policy.max_batch_size, 1));
    candidates_.clear();
    for (Level& level : levels_) {
      for (Entry& entry : level.queue) {
        if (candidates_.size() > max_requests) break;
        candidates_.push_back(&entry);
      }
      if (candidates_.size() > max_requests) break;
    }
    pending.clear();
    const InferenceRequest& head = *candidates_.front()->request;
    size_t compatible = 0;
    while (compatible < candidates_.size() && compatible < max_requests &&
           Compatible(head, *candidates_[compatible]->request)) {
      const InferenceRequest& request = *candidates_[compatible]->request;
      pending.push_back({.batch_size = request.batch_size,
                         .enqueue_time = request.enqueue_time,
                         .tokens = request.token_count});
      ++compatible;
    }
    const bool more_incompatible =
        compatible < candidates_.size() && !Compatible(head, *candidates_[compatible]->request);
    // While stopping nothing waits for a fuller batch.
    const auto decide_time = stopping_ ? common::Clock::TimePoint::max() : now;
    const BatchDecision decision = DecideBatch(options_.policy, pending, more_incompatible,
                                               /*executor_idle=*/idle || stopping_, decide_time);
    if (decision.request_count == 0) {
      wait_until(std::min(decision.wake_at, next_expiry));
      continue;
    }

    // 3. Hand the batch over, outside the lock: an executor's Execute() may do device work (the
    // CUDA executor copies the batch to pinned memory and issues its copies and kernels), and
    // Enqueue() from RPC threads must not wait behind it. `dispatching_` counts the batch while
    // it is between the queue and the executor, so Idle() never sees queued + in flight both at
    // zero in that gap, and keeps Enqueue's shortcut from dispatching meanwhile, so the slot
    // PickExecutor() found stays free.
    Batch batch;
    batch.dispatch_time = now;
    // The batch is the first request_count candidates: the fronts of the levels, in order.
    size_t level_index = 0;
    for (int i = 0; i < decision.request_count; ++i) {
      while (levels_[level_index].queue.empty()) ++level_index;
      std::deque<Entry>& queue = levels_[level_index].queue;
      Entry& entry = queue.front();
      ForgetLocked(entry);
      if (entry.request->IsCancelled()) {  // cancelled since the last sweep: never runs
        swept.emplace_back(std::move(entry.request), absl::StatusCode::kCancelled);
      } else {
        batch.items += entry.request->batch_size;
        batch.tokens += entry.request->token_count;
        batch.requests.push_back(std::move(entry.request));
      }
      queue.pop_front();
      --queued_;
    }
    if (batch.requests.empty()) continue;
    DispatchLocked(executor, std::move(batch));
  }
}

}  // namespace sluice::engine
