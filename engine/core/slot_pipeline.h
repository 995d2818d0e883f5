#pragma once

// SlotPipeline: the part of every executor that is not the backend's. A fixed pool of slots (one
// batch in flight each), the FIFO of batches waiting to be answered, the in-flight count, Stop(),
// the fault latch, and the completion thread that answers batches in the order they were taken.
// An executor is a SlotBackend (how to start a batch in slot s, wait for it, and turn its results
// into responses) plus one SlotPipeline; CpuExecutor and CudaExecutor are both that.
//
// Per batch, in this order:
//   Issue(s, batch)   on the issue thread: the pipeline's own thread (issue_thread = true: the CPU
//                     executor, whose "issue" is the model run itself, so batch k+1 computes there
//                     while the completion thread answers batch k), or the caller of Execute()
//                     (issue_thread = false: the CUDA executor, whose issue only queues work on
//                     its streams and never waits for the device; and the CPU executor of a
//                     model with one instance, see answer_on_caller).
//   Wait(s)           on the completion thread: blocks until slot s's batch is done.
//   Scatter(s, ...)   on the completion thread: one response per request, from the slot's results.
// With answer_on_caller, all three run on the caller of Execute(), which returns once the batch
// is answered and its slot freed: the pipeline then has no thread of its own.
// then the pipeline stamps the answers, records the batch's stats, answers the requests, and only
// then frees slot s (on_slot_freed): a backend never sees Issue(s) again before its batch in s was
// answered, so whatever it keeps per slot (staging buffers, device buffers, events, a ragged
// layout of per-request sequence lengths and output shapes) is its own type, indexed by slot, and
// needs no lock of its own. The pipeline never looks at items, shapes or bytes.
//
// Fault order (one for every backend; tested in slot_pipeline_test.cc):
//  1. A fault is an INTERNAL status from Issue (a failed launch, a backend fault in a model run,
//     the before_batch_for_test hook), from Wait (an error found when the device finished) or from
//     Scatter (outputs that break the config). Other codes from Issue fail only their batch (bad
//     input found by a model): no fault. Any error from Wait or Scatter is a fault, made INTERNAL
//     with its payloads kept (a process-fatal mark, engine/core/device_fault.h, reaches on_fault).
//  2. The first fault latches at once, on the thread that found it: from then on HasFreeSlot() is
//     false for good, and batches taken but not yet issued fail INTERNAL without reaching the
//     backend ("batch not run, its instance faulted earlier: <first fault>").
//  3. Every batch is answered in the order it was taken, each on its own evidence: a batch issued
//     before the fault latched is still waited for and answered with its own result (on a CPU its
//     run is independent of the faulted one; on a GPU a sticky error makes its Wait fail too). So
//     the batch that faulted is answered after the batches ahead of it, never before.
//  4. on_fault is called exactly once, on the thread that answers (the completion thread, the
//     issue thread for a batch it answers itself, see answer_on_issue_thread_when_idle, or the
//     caller of Execute() with answer_on_caller), right
//     after the requests of the
//     first batch failed by a fault are answered and before that batch's slot is freed, with the
//     latched (first) fault. Answers first: a client sees its error no later than the engine marks
//     the model not ready. Before the slot is freed: the batcher, woken by on_slot_freed, already
//     finds the model faulted and hands it nothing more.
// Why this order: it is the only one that never answers a request with another batch's fault,
// never runs a batch on an instance known to be broken, and never reuses a slot whose batch may
// still be on the device. A batch whose Issue failed part-way must leave nothing on the device
// that outlives the executor's destructor (CudaExecutor synchronizes its streams there).
//
// Stop(): finishes every batch taken (issued, waited, answered), then joins the pipeline's
// threads; Execute() is not allowed after it. Thread-safety: as Executor (HasFreeSlot/InFlight
// from any thread; Execute from one thread at a time, as the model's scheduler calls it; Stop
// from the owner).

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "engine/core/executor.h"
#include "engine/core/inference_request.h"
#include "engine/core/model_stats.h"

namespace sluice::engine {

// What Scatter() hands back for one batch: one response per request, in batch order (shapes and
// sizes are the backend's business: a ragged batch gives each request its own), and the batch's
// phase times for ModelStats.
struct SlotAnswers {
  std::vector<InferenceResponse> responses;
  std::chrono::nanoseconds input_time{0};
  std::chrono::nanoseconds infer_time{0};
  std::chrono::nanoseconds output_time{0};
};

// The backend half of an executor. Slot indices are 0 .. slot_count-1; between Issue(s) and the
// moment its batch is answered, slot s belongs to that batch alone (see above). The pipeline calls
// Issue from one thread at a time and Wait/Scatter from the completion thread only.
class SlotBackend {
 public:
  virtual ~SlotBackend() = default;
  // Starts `batch` in slot `s` (gathers its inputs into the slot's staging, runs or queues the
  // model). INTERNAL: a fault (the fault order above); another code fails only this batch, and
  // then Wait/Scatter are not called for it.
  virtual absl::Status Issue(int s, const Batch& batch) = 0;
  // Blocks until slot `s`'s batch is done. Not called for a batch whose Issue failed. Any error
  // is a fault.
  virtual absl::Status Wait(int s) = 0;
  // Fills `answers` from slot `s`'s results (answers.responses starts empty). Called only after a
  // successful Wait. Any error (malformed outputs) is a fault.
  virtual absl::Status Scatter(int s, const Batch& batch, SlotAnswers& answers) = 0;
};

struct SlotPipelineOptions {
  // Names the executor in errors: "model 'x'" or "cuda:0 executor of model 'x'".
  std::string label;
  // slot_count, on_slot_freed, on_fault, stats and before_batch_for_test, as ExecutorOptions says.
  // before_batch_for_test runs on the issuing thread right before Issue; a non-OK status is that
  // batch's fault (INTERNAL "<label>: injected test fault: ...") and Issue is not called.
  ExecutorOptions executor;
  // True: Execute() only queues, the pipeline's issue thread calls Issue (a backend whose issue
  // is the computation). False: Execute() calls Issue on the caller's thread (a backend whose
  // issue only queues device work).
  bool issue_thread = true;
  // With issue_thread: when a batch's Issue succeeded and nothing overlaps it (no batch waits to
  // be issued, none waits to be answered, the completion thread answers none), the issue thread
  // waits for, scatters and answers it itself instead of handing it to the completion thread:
  // one thread wake-up fewer per request at low load. A batch taken while it answers waits for
  // it, so the executor gives up the compute/answer overlap exactly when there was nothing to
  // overlap with. Batches are still answered in the order taken, one at a time.
  bool answer_on_issue_thread_when_idle = false;
  // Without issue_thread: Execute() also waits for, scatters and answers the batch, and frees its
  // slot (on_slot_freed runs on the caller too), before it returns; no completion thread is
  // started. For a CPU model with one instance, whose scheduler's batcher thread then computes
  // and answers each batch itself: no hand-off at all between the queue and the answers, and
  // nothing lost, since one instance has nothing to overlap but its own answering with its next
  // run (see engine/README.md). Batches are then one at a time by construction.
  bool answer_on_caller = false;
};

class SlotPipeline {
 public:
  // Starts the completion thread (and the issue thread if asked; neither with answer_on_caller).
  // `backend` is borrowed and must outlive the pipeline (or its Stop()). InvalidArgument for a
  // slot count < 1, no stats, or answer_on_caller with issue_thread; ResourceExhausted if a thread
  // cannot start.
  static absl::StatusOr<std::unique_ptr<SlotPipeline>> Create(SlotBackend& backend,
                                                              SlotPipelineOptions options);
  // Stop()s.
  ~SlotPipeline();
  SlotPipeline(const SlotPipeline&) = delete;
  SlotPipeline& operator=(const SlotPipeline&) = delete;

  // As Executor: a slot is free, the pipeline is not stopping and has not faulted.
  bool HasFreeSlot() const;
  // As Executor::Execute; with answer_on_caller it returns after the batch is answered.
  // REQUIRES: HasFreeSlot() (a fault latched since is fine: the batch then fails without
  // running).
  void Execute(Batch batch);
  // Batches taken and not yet answered.
  int InFlight() const;
  // Whether Execute() only queues (a lock, a push, a notify): true with an issue thread, false
  // when Execute() calls the backend's Issue itself. What an executor on this pipeline answers to
  // the scheduler's "may an RPC thread call Execute?" (Executor::ExecuteOnlyEnqueues on main).
  bool ExecuteOnlyEnqueues() const { return options_.issue_thread; }
  // Whether Execute() runs the batch to its answers (answer_on_caller): Executor::ExecuteRunsBatch.
  bool ExecuteRunsBatch() const { return options_.answer_on_caller; }
  // Idempotent. With answer_on_caller, waits for an Execute() running on another thread.
  void Stop();
  // The first fault; OK while healthy.
  absl::Status fault() const;

 private:
  struct Work {
    Batch batch;
    int slot = -1;
    // Why the batch failed before Wait (issue error, injected fault, not run behind a fault).
    absl::Status issued;
  };

  SlotPipeline(SlotBackend& backend, SlotPipelineOptions options);
  absl::Status StartThreads();
  void IssueLoop();
  void CompletionLoop();
  // Runs the hook and Issue for `work` unless a fault latched; on the issuing thread.
  void IssueOne(Work& work);
  // Latches `fault` if it is the first.
  void Latch(const absl::Status& fault);
  // Waits for, scatters and answers `work` (or fails it), reports a first fault, frees its slot
  // and clears answering_. On the completion thread, or on the issue thread (see
  // answer_on_issue_thread_when_idle); REQUIRES: this thread set answering_.
  void AnswerOne(Work& work);
  // Fails every request of `work` with `status`.
  void FailBatch(Work& work, const absl::Status& status);
  void AnswerBatch(Work& work, SlotAnswers& answers);

  SlotBackend& backend_;
  const SlotPipelineOptions options_;

  mutable common::Mutex mu_;
  common::CondVar issue_cv_;
  common::CondVar completion_cv_;
  std::vector<int> free_slots_ ABSL_GUARDED_BY(mu_);
  std::deque<Work> issue_queue_ ABSL_GUARDED_BY(mu_);
  std::deque<Work> completion_queue_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The issue thread has drained its queue after Stop() (always true without an issue thread).
  bool issue_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status fault_ ABSL_GUARDED_BY(mu_);
  // A thread is answering a batch (AnswerOne): the completion thread, or the issue thread for a
  // batch it answers itself. One at a time, which keeps the answers in order.
  bool answering_ ABSL_GUARDED_BY(mu_) = false;

  // Used only by the thread that holds answering_ (AnswerOne).
  bool fault_reported_ = false;
  std::vector<RequestTiming> timings_;

  std::mutex stop_mu_;  // serializes Stop(): one caller joins, the others wait
  std::thread issue_thread_;
  std::thread completion_thread_;
};

}  // namespace sluice::engine
