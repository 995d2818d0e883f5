#include "engine/core/slot_pipeline.h"

#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "engine/core/batch_answers.h"
#include "engine/core/device_fault.h"

namespace sluice::engine {

absl::StatusOr<std::unique_ptr<SlotPipeline>> SlotPipeline::Create(SlotBackend& backend,
                                                                   SlotPipelineOptions options) {
  if (options.executor.slot_count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("executor slot count ", options.executor.slot_count, " is < 1"));
  }
  if (options.executor.stats == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(options.label, ": executor needs stats"));
  }
  if (options.answer_on_caller && options.issue_thread) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.label, ": answer_on_caller needs issue_thread = false"));
  }
  std::unique_ptr<SlotPipeline> pipeline(new SlotPipeline(backend, std::move(options)));
  RETURN_IF_ERROR(pipeline->StartThreads());
  return pipeline;
}

SlotPipeline::SlotPipeline(SlotBackend& backend, SlotPipelineOptions options)
    : backend_(backend), options_(std::move(options)) {
  common::MutexLock lock(&mu_);
  // Slot 0 first: a lightly loaded model keeps reusing the same (warm) slot.
  for (int s = options_.executor.slot_count - 1; s >= 0; --s) free_slots_.push_back(s);
  issue_done_ = !options_.issue_thread;
}

absl::Status SlotPipeline::StartThreads() {
  // std::thread throws std::system_error when the process cannot start another thread; from a
  // constructor, a second thread failing with the first one running would std::terminate (a
  // joinable std::thread destroyed). Here the destructor joins whatever did start.
  try {
    if (options_.issue_thread) issue_thread_ = std::thread([this] { IssueLoop(); });
    if (!options_.answer_on_caller) completion_thread_ = std::thread([this] { CompletionLoop(); });
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat(options_.label, ": cannot start an executor thread: ", e.what()));
  }
  return absl::OkStatus();
}

SlotPipeline::~SlotPipeline() { Stop(); }

bool SlotPipeline::HasFreeSlot() const {
  common::MutexLock lock(&mu_);
  return !free_slots_.empty() && !stopping_ && fault_.ok();
}

int SlotPipeline::InFlight() const {
  common::MutexLock lock(&mu_);
  return in_flight_;
}

absl::Status SlotPipeline::fault() const {
  common::MutexLock lock(&mu_);
  return fault_;
}

void SlotPipeline::Latch(const absl::Status& fault) {
  common::MutexLock lock(&mu_);
  if (fault_.ok()) fault_ = fault;
}

void SlotPipeline::Execute(Batch batch) {
  Work work;
  work.batch = std::move(batch);
  {
    common::MutexLock lock(&mu_);
    CHECK(!free_slots_.empty());
    CHECK(!stopping_);
    work.slot = free_slots_.back();
    free_slots_.pop_back();
    ++in_flight_;
    if (options_.issue_thread) {
      issue_queue_.push_back(std::move(work));
      issue_cv_.Signal();
      return;
    }
    if (options_.answer_on_caller) {
      // Callers take turns (the scheduler's one dispatcher at a time): this is the only answer
      // in progress, so the order is the order taken.
      CHECK(!answering_);
      answering_ = true;
    }
  }
  IssueOne(work);
  if (options_.answer_on_caller) {
    AnswerOne(work);  // a failed Issue is answered there too, with the fault order's reporting
    return;
  }
  {
    common::MutexLock lock(&mu_);
    completion_queue_.push_back(std::move(work));
  }
  completion_cv_.Signal();
}

void SlotPipeline::IssueOne(Work& work) {
  if (absl::Status earlier = fault(); !earlier.ok()) {
    // Taken before the fault was seen: like the batches queued on a CUDA stream behind a failed
    // launch, it fails with the instance rather than running on a broken one.
    work.issued = absl::InternalError(absl::StrCat(
        options_.label, ": batch not run, its instance faulted earlier: ", earlier.message()));
    return;
  }
  if (options_.executor.before_batch_for_test) {
    if (absl::Status injected = options_.executor.before_batch_for_test(); !injected.ok()) {
      work.issued = absl::InternalError(
          absl::StrCat(options_.label, ": injected test fault: ", injected.message()));
      CopyPayloads(injected, work.issued);  // an injected sticky code stays process-fatal
      Latch(work.issued);
      return;
    }
  }
  work.issued = backend_.Issue(work.slot, work.batch);
  // From here on HasFreeSlot() is false: the batcher hands this instance nothing more.
  if (work.issued.code() == absl::StatusCode::kInternal) Latch(work.issued);
}

void SlotPipeline::IssueLoop() {
  for (;;) {
    Work work;
    {
      common::MutexLock lock(&mu_);
      while (!stopping_ && issue_queue_.empty()) issue_cv_.Wait(&mu_);
      if (issue_queue_.empty()) {
        // Stopping with nothing left to issue: the completion thread may finish once its FIFO is
        // empty too.
        issue_done_ = true;
        completion_cv_.SignalAll();
        return;
      }
      work = std::move(issue_queue_.front());
      issue_queue_.pop_front();
    }
    IssueOne(work);
    bool answer_here = false;
    {
      common::MutexLock lock(&mu_);
      // Nothing to overlap with: answering here saves waking the completion thread. Failed
      // issues still go there (the fault order's usual path).
      answer_here = options_.answer_on_issue_thread_when_idle && work.issued.ok() &&
                    issue_queue_.empty() && completion_queue_.empty() && !answering_;
      if (answer_here) {
        answering_ = true;
      } else {
        completion_queue_.push_back(std::move(work));
      }
    }
    if (answer_here) {
      AnswerOne(work);
    } else {
      completion_cv_.Signal();
    }
  }
}

void SlotPipeline::CompletionLoop() {
  for (;;) {
    Work work;
    {
      common::MutexLock lock(&mu_);
      // The issue thread may be answering a batch itself: the next one waits for it (order).
      while ((completion_queue_.empty() || answering_) &&
             !(stopping_ && issue_done_ && completion_queue_.empty())) {
        completion_cv_.Wait(&mu_);
      }
      // Stopping, nothing left to issue, and every batch taken answered.
      if (completion_queue_.empty()) return;
      work = std::move(completion_queue_.front());
      completion_queue_.pop_front();
      answering_ = true;
    }
    AnswerOne(work);
  }
}

void SlotPipeline::AnswerOne(Work& work) {
  {
    absl::Status status = work.issued;
    SlotAnswers answers;
    if (status.ok()) {
      status = backend_.Wait(work.slot);
      if (!status.ok()) {
        // INTERNAL, keeping the payloads (a process-fatal mark: engine/core/device_fault.h).
        status = WithInternalCode(status);
        Latch(status);
      }
    }
    if (status.ok()) {
      status = backend_.Scatter(work.slot, work.batch, answers);
      if (status.ok() && answers.responses.size() != work.batch.requests.size()) {
        status = absl::InternalError(absl::StrCat(options_.label, ": backend answered ",
                                                  answers.responses.size(), " of ",
                                                  work.batch.requests.size(), " requests"));
      }
      if (!status.ok()) {
        status = WithInternalCode(status);
        Latch(status);
      }
    }
    if (status.ok()) {
      AnswerBatch(work, answers);
    } else {
      FailBatch(work, status);
      if (status.code() == absl::StatusCode::kInternal && !fault_reported_) {
        // An INTERNAL batch error always latched a fault (IssueOne, above): report it once.
        const absl::Status latched = fault();
        if (!latched.ok()) {
          fault_reported_ = true;
          if (options_.executor.on_fault) options_.executor.on_fault(latched);
        }
      }
    }
  }
  bool more_to_answer = false;
  {
    common::MutexLock lock(&mu_);
    free_slots_.push_back(work.slot);
    --in_flight_;
    answering_ = false;
    // With answer_on_caller, a Stop() on another thread may wait for this batch (completion_cv_).
    more_to_answer = !completion_queue_.empty() || (options_.answer_on_caller && stopping_);
  }
  // A batch queued for the completion thread while the issue thread answered this one. (Not
  // signalled otherwise: an idle completion thread is not woken for nothing.)
  if (more_to_answer) completion_cv_.SignalAll();
  if (options_.executor.on_slot_freed) options_.executor.on_slot_freed();
}

void SlotPipeline::FailBatch(Work& work, const absl::Status& status) {
  for (auto& request : work.batch.requests) {
    options_.executor.stats->RecordFailure(*request, status.code());
    request->Complete(status);
  }
}

void SlotPipeline::AnswerBatch(Work& work, SlotAnswers& answers) {
  Batch& batch = work.batch;
  StampAnswers(batch, std::chrono::steady_clock::now(), answers.responses, timings_);
  // Stats before answers: a client that reads ModelStatistics right after its answer sees itself.
  options_.executor.stats->RecordBatch({.items = static_cast<uint64_t>(batch.items),
                                        .input = answers.input_time,
                                        .infer = answers.infer_time,
                                        .output = answers.output_time,
                                        .requests = timings_});
  for (size_t r = 0; r < batch.requests.size(); ++r) {
    batch.requests[r]->Complete(std::move(answers.responses[r]));
  }
}

void SlotPipeline::Stop() {
  std::lock_guard<std::mutex> stop_lock(stop_mu_);
  {
    common::MutexLock lock(&mu_);
    stopping_ = true;
  }
  issue_cv_.SignalAll();
  completion_cv_.SignalAll();
  if (issue_thread_.joinable()) issue_thread_.join();
  if (completion_thread_.joinable()) completion_thread_.join();
  if (options_.answer_on_caller) {
    // No thread to join: the batch an Execute() on another thread is running is answered first.
    common::MutexLock lock(&mu_);
    while (in_flight_ > 0) completion_cv_.Wait(&mu_);
  }
}

}  // namespace sluice::engine
