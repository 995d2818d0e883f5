#pragma once

// The ModelScheduler tests' shared pieces (engine/model_scheduler_*_test.cc): FakeExecutor, an
// Executor that records the batches it is given and finishes them when the test says so, and the
// ModelSchedulerTest fixture (a scheduler on a fake clock with one FakeExecutor). Test-only;
// header-only.
//
// A test checks that something does NOT happen (a batch dispatched too early) right after
// ModelScheduler::WaitUntilBatcherSleepsForTest: the batcher has then seen the clock and the queue
// and gone back to sleep, so nothing more happens until the test moves the fake clock.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "engine/core/model_stats.h"
#include "engine/model_scheduler.h"
#include "gtest/gtest.h"
#include "tests/support/engine/answer.h"
#include "tests/support/engine/async_timeout.h"

namespace sluice::engine::testing {

// Every answer the scheduler gives, by request id.
using Answers = AnswerLog;

// An Executor that records the batches it is given and finishes them when the test says so.
class FakeExecutor final : public Executor {
 public:
  struct Record {
    int items = 0;
    int64_t tokens = 0;
    std::vector<std::string> ids;
    // The first input's shape, per request.
    std::vector<Shape> shapes;
    // The thread that called Execute().
    std::thread::id thread;
  };

  explicit FakeExecutor(int free_slots) : free_slots_(free_slots) {}

  // What a real executor's ExecutorOptions::on_slot_freed does: wake the scheduler.
  void set_on_slot_freed(std::function<void()> on_slot_freed) {
    on_slot_freed_ = std::move(on_slot_freed);
  }
  // Answers every batch inside Execute (OK), so slots never run out.
  void set_auto_complete(bool auto_complete) {
    std::lock_guard<std::mutex> lock(mu_);
    auto_complete_ = auto_complete;
  }

  // What ExecuteOnlyEnqueues() answers (the real CPU executor's true lets the scheduler dispatch
  // on the enqueuing thread). Set before Start().
  void set_execute_only_enqueues(bool value) { execute_only_enqueues_ = value; }
  bool ExecuteOnlyEnqueues() const override { return execute_only_enqueues_; }
  // What ExecuteRunsBatch() answers (the CPU executor of a one-instance model: Execute() runs and
  // answers the batch on the batcher thread; use with set_auto_complete(true)). Set before Start().
  void set_execute_runs_batch(bool value) { execute_runs_batch_ = value; }
  bool ExecuteRunsBatch() const override { return execute_runs_batch_; }

  bool HasFreeSlot() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return free_slots_ > 0;
  }

  // While the gate is closed, Execute() waits in the executor (as a device executor's Execute
  // takes time) until OpenGate().
  void CloseGate() {
    std::lock_guard<std::mutex> lock(mu_);
    gate_closed_ = true;
  }
  void OpenGate() {
    std::lock_guard<std::mutex> lock(mu_);
    gate_closed_ = false;
    cv_.notify_all();
  }
  // Waits until an Execute() call waits at the closed gate.
  bool WaitAtGate() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kAsyncTimeout, [&] { return waiting_at_gate_; });
  }

  void Execute(Batch batch) override {
    std::vector<std::unique_ptr<InferenceRequest>> to_answer;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stopped_) ++executes_after_stop_;
      ++executing_;
      if (gate_closed_) {
        waiting_at_gate_ = true;
        cv_.notify_all();
        cv_.wait(lock, [&] { return !gate_closed_; });
        waiting_at_gate_ = false;
      }
      if (free_slots_ <= 0) ++executes_without_slot_;
      Record record;
      record.thread = std::this_thread::get_id();
      record.items = batch.items;
      record.tokens = batch.tokens;
      for (const auto& request : batch.requests) {
        record.ids.push_back(request->id);
        record.shapes.push_back(request->inputs.empty() ? Shape{} : request->inputs[0].shape);
      }
      records_.push_back(std::move(record));
      if (auto_complete_) {
        to_answer = std::move(batch.requests);
      } else {
        --free_slots_;
        in_flight_.push_back(std::move(batch));
      }
      --executing_;
      cv_.notify_all();
    }
    for (auto& request : to_answer) Answer(*request);
  }

  int InFlight() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(in_flight_.size());
  }

  // Finishes what it holds, as a real executor finishes every batch it took.
  void Stop() override {
    std::deque<Batch> batches;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (executing_ > 0) ++stops_during_execute_;
      stopped_ = true;
      batches.swap(in_flight_);
    }
    for (Batch& batch : batches) {
      for (auto& request : batch.requests) Answer(*request);
    }
  }

  // Answers every batch in flight (OK), frees their slots and tells the scheduler.
  void FinishAll() {
    std::deque<Batch> batches;
    {
      std::lock_guard<std::mutex> lock(mu_);
      batches.swap(in_flight_);
      free_slots_ += static_cast<int>(batches.size());
    }
    for (Batch& batch : batches) {
      for (auto& request : batch.requests) Answer(*request);
    }
    if (on_slot_freed_) on_slot_freed_();
  }

  // Frees `n` more slots and tells the scheduler.
  void AddSlots(int n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_slots_ += n;
    }
    if (on_slot_freed_) on_slot_freed_();
  }

  bool WaitForBatches(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kAsyncTimeout, [&] { return records_.size() >= n; });
  }

  // Waits until `n` requests in all were handed over.
  bool WaitForRequests(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kAsyncTimeout, [&] {
      size_t requests = 0;
      for (const Record& record : records_) requests += record.ids.size();
      return requests >= n;
    });
  }

  std::vector<Record> records() const {
    std::lock_guard<std::mutex> lock(mu_);
    return records_;
  }

  int executes_without_slot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return executes_without_slot_;
  }
  // Stop() called while an Execute() ran, or Execute() called after Stop(): the scheduler must
  // never do either.
  int stops_during_execute() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stops_during_execute_ + executes_after_stop_;
  }

 private:
  static void Answer(InferenceRequest& request) {
    InferenceResponse response;
    response.model_name = request.model_name();
    response.id = request.id;
    request.Complete(std::move(response));
  }

  std::function<void()> on_slot_freed_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int free_slots_;
  bool auto_complete_ = false;
  bool gate_closed_ = false;
  bool waiting_at_gate_ = false;
  int executes_without_slot_ = 0;
  int executing_ = 0;
  bool stopped_ = false;
  int stops_during_execute_ = 0;
  int executes_after_stop_ = 0;
  bool execute_only_enqueues_ = false;
  bool execute_runs_batch_ = false;
  std::deque<Batch> in_flight_;
  std::vector<Record> records_;
};

inline std::vector<std::string> Ids(const FakeExecutor::Record& record) { return record.ids; }

class ModelSchedulerTest : public ::testing::Test {
 protected:
  ModelSchedulerTest() {
    config_.name = "m";
    config_.backend = "fake";
    config_.max_batch_size = 4;
    config_.inputs = {TensorSpec{"IN", DataType::kFp32, {2}}};
    config_.outputs = {TensorSpec{"OUT", DataType::kFp32, {2}}};
  }

  // Batching with max_batch_size 4 and a 100us delay, a queue of 16.
  SchedulerOptions DefaultOptions() {
    SchedulerOptions options;
    options.clock = &clock_;
    options.stats = &stats_;
    options.queue_policy.max_queue_size = 16;
    options.policy.max_batch_size = config_.max_batch_size;
    options.policy.batching_enabled = true;
    options.policy.max_queue_delay = std::chrono::microseconds(100);
    return options;
  }

  // Creates the scheduler (not started) with one fake executor of `slots` free slots.
  void Create(SchedulerOptions options, int slots) {
    absl::StatusOr<std::unique_ptr<ModelScheduler>> scheduler =
        ModelScheduler::Create(config_, options);
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    scheduler_ = *std::move(scheduler);
    auto executor = std::make_unique<FakeExecutor>(slots);
    executor->set_on_slot_freed([s = scheduler_.get()] { s->NotifySlotFreed(); });
    executor_ = executor.get();
    pending_executors_.push_back(std::move(executor));
  }

  void Start() { scheduler_->Start(std::move(pending_executors_)); }

  void CreateAndStart(SchedulerOptions options, int slots) {
    Create(options, slots);
    Start();
  }

  // A validated request of `batch` items whose per-item shape is [width].
  std::unique_ptr<InferenceRequest> Request(const std::string& id, int batch = 1,
                                            int64_t width = 2) {
    auto request = std::make_unique<InferenceRequest>("m", 1, answers_.For(id));
    request->id = id;
    buffers_.emplace_back(static_cast<size_t>(batch * width), 1.0f);
    const std::vector<float>& buffer = buffers_.back();
    request->inputs.push_back(
        TensorView{"IN", DataType::kFp32, Shape{batch, width},
                   std::as_bytes(std::span<const float>(buffer.data(), buffer.size()))});
    request->batch_size = batch;
    request->received_time = std::chrono::steady_clock::now();
    return request;
  }

  void Enqueue(const std::string& id, int batch = 1, int64_t width = 2) {
    scheduler_->Enqueue(Request(id, batch, width));
  }

  // Moves the fake clock and wakes the batcher so that it looks at the time again.
  void Advance(std::chrono::microseconds d) {
    clock_.Advance(d);
    scheduler_->NotifySlotFreed();
  }

  void TearDown() override {
    if (scheduler_ != nullptr) {
      // Let whatever is still queued run so that Stop() can finish it.
      if (executor_ != nullptr) {
        executor_->set_auto_complete(true);
        executor_->AddSlots(1);
        executor_->FinishAll();
        EXPECT_EQ(executor_->executes_without_slot(), 0)
            << "Execute() called while the executor had no free slot";
        EXPECT_EQ(executor_->stops_during_execute(), 0)
            << "the executor was stopped while Execute() ran, or Execute() came after Stop()";
      }
      scheduler_.reset();
    }
    // Nothing accepted is ever lost, and nothing is answered twice.
    for (const std::string& id : answers_.issued()) {
      EXPECT_EQ(answers_.Count(id), 1) << "request " << id;
    }
  }

  ModelConfig config_;
  common::FakeClock clock_{common::Clock::TimePoint{} + std::chrono::hours(1)};
  ModelStats stats_;
  Answers answers_;
  std::deque<std::vector<float>> buffers_;
  std::vector<std::unique_ptr<Executor>> pending_executors_;
  FakeExecutor* executor_ = nullptr;  // owned by scheduler_ once started
  std::unique_ptr<ModelScheduler> scheduler_;
};

// `request` with the priority the client asked for (0: the default level).
inline std::unique_ptr<InferenceRequest> WithPriority(std::unique_ptr<InferenceRequest> request,
                                                      uint64_t priority) {
  request->priority = priority;
  return request;
}

}  // namespace sluice::engine::testing
