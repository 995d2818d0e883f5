#pragma once

// ModelScheduler: the bounded queue of one model version and its batcher thread. Enqueue() is
// called from RPC threads and returns at once; the batcher thread forms batches (DecideBatch) when
// an executor has a free slot, expires requests whose deadline passed, and hands batches over
// (Executor::Execute) without holding the queue lock: the lock covers queue operations only.
// One shortcut saves the batcher's hop at low load: a request that finds the queue empty and an
// executor that can take it now (the policy would dispatch it alone at once, and the executor's
// Execute() only enqueues) is handed to that executor by the RPC thread itself.
// An executor whose Execute() runs the batch (Executor::ExecuteRunsBatch: a CPU model with one
// instance) makes the batcher thread the one that computes and answers: it takes a batch, runs
// it, answers it, and takes the next from what queued meanwhile, without sleeping or waking
// anyone while requests keep coming. While it runs a batch it does not sweep the queue, so a
// queued request whose deadline passes, or whose client cancels, is answered when that batch
// ends (at most one batch's run late), still before it could run.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "engine/batch_policy.h"
#include "engine/core/executor.h"
#include "engine/core/inference_request.h"
#include "engine/core/model_config.h"

namespace sluice::engine {

class ModelStats;

// The queue policy of one priority level.
struct QueuePolicy {
  // Requests that may wait at this level; one beyond it is answered RESOURCE_EXHAUSTED at once.
  // >= 1.
  int64_t max_queue_size = 4096;
  // A request that waits longer fails with DEADLINE_EXCEEDED; 0 = no limit.
  std::chrono::microseconds default_timeout{0};
  // Whether a request's `timeout` replaces default_timeout. (Its `deadline` always applies.)
  bool allow_timeout_override = false;
};

struct SchedulerOptions {
  // Time source for delays and deadlines; borrowed, must outlive the scheduler.
  const common::Clock* clock = &common::SteadyClock::Default();
  // The policy of every priority level without one in level_policies.
  QueuePolicy queue_policy;
  // Priority levels, each a queue of its own; level 1 is served first, and a batch is formed
  // from the queued requests in that order (level by level, arrival order within a level).
  int priority_levels = 1;
  // The level of requests whose priority is 0 or above priority_levels. In [1, priority_levels].
  int default_priority_level = 1;
  // Levels with a policy of their own, by level (1-based).
  std::map<int, QueuePolicy> level_policies;
  BatchPolicy policy;
  // Borrowed; must outlive the scheduler.
  ModelStats* stats = nullptr;
};

// Thread-safe. Owns its executors and the batcher thread.
class ModelScheduler {
 public:
  // `config` is borrowed and must outlive the scheduler. Starts nothing until Start().
  static absl::StatusOr<std::unique_ptr<ModelScheduler>> Create(const ModelConfig& config,
                                                                SchedulerOptions options);
  // Stop()s.
  ~ModelScheduler();

  // Starts the batcher over these executors (owned). Executors must call NotifySlotFreed() when a
  // slot frees. REQUIRES: not started, executors non-empty.
  void Start(std::vector<std::unique_ptr<Executor>> executors);

  // How often the batcher looks for cancelled requests in the queue while any is cancellable
  // (scheduler clock): a cancelled request leaves the queue at most this long after its cancel,
  // and at the latest when it reaches the head of the queue, before it could run.
  static constexpr std::chrono::milliseconds kCancelSweepPeriod{1};

  // Takes the request into the queue of its priority level. Answers it at once with
  // RESOURCE_EXHAUSTED (that level's queue is full) or UNAVAILABLE
  // (stopping); otherwise it is answered later by an executor, or with DEADLINE_EXCEEDED (its
  // deadline or queue timeout passed while queued) or CANCELLED (its client cancelled).
  // When nothing is queued, no batch is being handed over, the policy would send this request
  // alone at once, and the executor it would go to has ExecuteOnlyEnqueues(), it is handed to
  // that executor on this thread (Execute() is a push onto the executor's queue) instead of
  // waking the batcher; it never waits here for anything but the queue lock and that push.
  // REQUIRES: the request was validated against the config (inputs in config order, batch_size).
  void Enqueue(std::unique_ptr<InferenceRequest> request);

  // Wakes the batcher: an executor slot is free (or, in tests, the fake clock moved).
  void NotifySlotFreed();

  // The model version can no longer run anything (an executor faulted): from now on Enqueue()
  // answers `reason` at once, and the batcher answers everything queued with it instead of
  // batching it. Batches already handed to executors are theirs to answer. The first reason
  // sticks. Never blocks (safe on an executor thread). REQUIRES: !reason.ok().
  void Fail(absl::Status reason);

  // Test-only: blocks until the batcher, having seen every Enqueue/NotifySlotFreed/Fail made
  // before this call (and so the clock as it was then), has done all it would do and gone back
  // to sleep; false if that takes longer than `timeout`. A test checks that something does NOT
  // happen (no batch before the delay) right after this, instead of sleeping and looking.
  bool WaitUntilBatcherSleepsForTest(std::chrono::seconds timeout);

  // Requests waiting in the queues of all levels (not yet handed to an executor).
  int64_t QueueDepth() const;
  // Nothing queued and no batch in flight on any executor. While the batcher is handing a batch
  // over (inside Executor::Execute) it waits for that to finish, so the answer is never "idle"
  // for a batch between the queue and the executor; a batch the batcher runs itself
  // (ExecuteRunsBatch) is "not idle" at once. Never call it from Execute().
  bool Idle() const;

  // Stops taking requests; answers everything queued (batches formed without waiting for the
  // delay) and in flight; joins the batcher and the executors. Idempotent, and safe to call
  // from several threads at once (later callers wait for the first).
  void Stop();

 private:
  struct Entry {
    std::unique_ptr<InferenceRequest> request;
    // Deadline in the scheduler clock's time; max() if none.
    common::Clock::TimePoint expires_at;
  };

  // One priority level: its policy and its queue, in arrival order.
  struct Level {
    QueuePolicy policy;
    std::deque<Entry> queue;  // guarded by mu_
  };

  ModelScheduler(const ModelConfig& config, SchedulerOptions options);
  void BatcherLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // The level (index into levels_) of a request with this priority.
  size_t LevelIndex(uint64_t priority) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes every queued entry, in service order. REQUIRES: mu_ held.
  std::vector<Entry> TakeAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bookkeeping for an entry that leaves the queue. REQUIRES: mu_ held.
  void ForgetLocked(const Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the expired and cancelled entries to `out` (with the code to answer) and recomputes
  // earliest_expiry_. REQUIRES: mu_ held.
  void SweepLocked(common::Clock::TimePoint now,
                   std::vector<std::pair<std::unique_ptr<InferenceRequest>, absl::StatusCode>>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers swept requests. REQUIRES: mu_ not held.
  void AnswerSwept(
      std::vector<std::pair<std::unique_ptr<InferenceRequest>, absl::StatusCode>>& swept)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Index of an executor with a free slot, round robin, preferring one with nothing in flight
  // (then `*idle` is true); -1 if none has a free slot.
  int PickExecutor(bool* idle) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Enqueue's shortcut: hands `request` (moved from only on success) alone to an executor that
  // can take it now, if the queue is empty, nobody else dispatches and the policy would send it
  // alone at once. REQUIRES: mu_ held; the request passed the queue checks.
  bool TryDispatchAloneLocked(std::unique_ptr<InferenceRequest>& request,
                              common::Clock::TimePoint now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands `batch` to executor `executor` outside the lock, counted in dispatching_ meanwhile.
  // REQUIRES: mu_ held, dispatching_ == 0, the executor has a free slot. Returns with mu_ held.
  void DispatchLocked(int executor, Batch batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Compatible(const InferenceRequest& a, const InferenceRequest& b) const;

  const ModelConfig& config_;
  const SchedulerOptions options_;
  // Whether any two requests may share a batch: every input dimension is fixed, or the model
  // batches ragged sequences (config_.ragged_batching).
  bool any_shapes_batch_ = true;

  // common::Mutex (an annotated std::mutex): clang's -Wthread-safety checks the ABSL_GUARDED_BY
  // members below.
  mutable common::Mutex mu_;
  common::CondVar cv_;
  // Index 0 is priority level 1. Sized once by the constructor; the queues are guarded by mu_.
  std::vector<Level> levels_ ABSL_GUARDED_BY(mu_);
  size_t default_level_ = 0;
  int64_t queued_ ABSL_GUARDED_BY(mu_) = 0;  // entries in all levels
  // Batches taken from the queue and not yet returned from Execute(): 0 or 1, since one thread
  // at a time dispatches (the batcher, or an RPC thread in Enqueue's shortcut), which keeps the
  // free slot PickExecutor() found free until Execute() takes it. Idle() and Stop() wait for it
  // to be 0 (dispatched_cv_), so that Idle() never reads queued and in flight both at zero while
  // a batch is between the two, and no executor is stopped under a dispatch. Guarded by mu_.
  int64_t dispatching_ ABSL_GUARDED_BY(mu_) = 0;
  mutable common::CondVar dispatched_cv_;
  // The batch being dispatched is run by its Execute() (Executor::ExecuteRunsBatch): Idle() does
  // not wait for it. Guarded by mu_.
  bool dispatch_runs_batch_ ABSL_GUARDED_BY(mu_) = false;
  // Bumped by every Enqueue, NotifySlotFreed and Fail; the batcher records the generation it saw
  // before each sleep (slept_cv_): WaitUntilBatcherSleepsForTest.
  uint64_t wake_generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t slept_generation_ ABSL_GUARDED_BY(mu_) = 0;
  common::CondVar slept_cv_;
  // Scratch for forming a batch: the first queued entries in service order. Guarded by mu_.
  std::vector<Entry*> candidates_ ABSL_GUARDED_BY(mu_);
  int64_t entries_with_deadline_ ABSL_GUARDED_BY(mu_) = 0;
  // No queued deadline is earlier (may be earlier than the earliest one left). Guarded by mu_.
  common::Clock::TimePoint earliest_expiry_ ABSL_GUARDED_BY(mu_) = common::Clock::TimePoint::max();
  int64_t entries_cancellable_ ABSL_GUARDED_BY(mu_) = 0;
  common::Clock::TimePoint next_cancel_sweep_ ABSL_GUARDED_BY(mu_){};
  // Set once by Start() (under mu_) before the batcher starts; read without mu_ by Stop() after
  // the batcher is joined.
  std::vector<std::unique_ptr<Executor>> executors_;
  mutable size_t next_executor_ ABSL_GUARDED_BY(mu_) = 0;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);  // see Fail()
  std::mutex stop_mu_;  // serializes Stop(): one caller joins, the others wait
  std::thread batcher_;
};

}  // namespace sluice::engine
