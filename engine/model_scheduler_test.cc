#include "engine/model_scheduler.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "engine/model_stats.h"
#include "engine/testing/answer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

using std::chrono::microseconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Bound for waiting on something the batcher thread does asynchronously.
constexpr auto kAsyncTimeout = std::chrono::seconds(10);
// A test checks that something does NOT happen (a batch dispatched too early) right after
// ModelScheduler::WaitUntilBatcherSleepsForTest: the batcher has then seen the clock and the queue
// and gone back to sleep, so nothing more happens until the test moves the fake clock.

// Every answer the scheduler gives, by request id.
using Answers = ::sluice::engine::testing::AnswerLog;

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

std::vector<std::string> Ids(const FakeExecutor::Record& record) { return record.ids; }

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
    options.policy.max_queue_delay = microseconds(100);
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
  void Advance(microseconds d) {
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

TEST_F(ModelSchedulerTest, CreateRejectsAnEmptyQueueBound) {
  SchedulerOptions options = DefaultOptions();
  options.queue_policy.max_queue_size = 0;
  EXPECT_EQ(ModelScheduler::Create(config_, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ModelSchedulerTest, NothingDispatchedBeforeTheDelay) {
  CreateAndStart(DefaultOptions(), /*slots=*/4);
  Enqueue("a");
  ASSERT_TRUE(scheduler_->WaitUntilBatcherSleepsForTest(kAsyncTimeout));
  EXPECT_TRUE(executor_->records().empty());
  EXPECT_EQ(answers_.Count("a"), 0);

  Advance(microseconds(99));
  ASSERT_TRUE(scheduler_->WaitUntilBatcherSleepsForTest(kAsyncTimeout));
  EXPECT_TRUE(executor_->records().empty());

  Advance(microseconds(1));
  ASSERT_TRUE(executor_->WaitForBatches(1));
  const auto records = executor_->records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].items, 1);
  EXPECT_THAT(Ids(records[0]), ElementsAre("a"));
}

TEST_F(ModelSchedulerTest, DelayCountsFromTheOldestRequest) {
  CreateAndStart(DefaultOptions(), /*slots=*/4);
  Enqueue("a");
  Advance(microseconds(60));
  Enqueue("b");
  ASSERT_TRUE(scheduler_->WaitUntilBatcherSleepsForTest(kAsyncTimeout));
  EXPECT_TRUE(executor_->records().empty());

  Advance(microseconds(40));  // a's 100us are up; b waited only 40us
  ASSERT_TRUE(executor_->WaitForBatches(1));
  const auto records = executor_->records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].items, 2);
  EXPECT_THAT(Ids(records[0]), ElementsAre("a", "b"));
}

TEST_F(ModelSchedulerTest, FullBatchDispatchedAtOnce) {
  CreateAndStart(DefaultOptions(), /*slots=*/4);
  for (const char* id : {"a", "b", "c", "d"}) Enqueue(id);
  // The clock never moves: only reaching max_batch_size can dispatch.
  ASSERT_TRUE(executor_->WaitForBatches(1));
  const auto records = executor_->records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].items, 4);
  EXPECT_THAT(Ids(records[0]), ElementsAre("a", "b", "c", "d"));
}

TEST_F(ModelSchedulerTest, FullBatchCountsItemsNotRequests) {
  CreateAndStart(DefaultOptions(), /*slots=*/4);
  Enqueue("a", /*batch=*/2);
  Enqueue("b", /*batch=*/2);
  ASSERT_TRUE(executor_->WaitForBatches(1));
  const auto records = executor_->records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].items, 4);
  EXPECT_THAT(Ids(records[0]), ElementsAre("a", "b"));
}

TEST_F(ModelSchedulerTest, BatchingOffRunsEachRequestAlone) {
  SchedulerOptions options = DefaultOptions();
  options.policy.batching_enabled = false;
  CreateAndStart(options, /*slots=*/8);
  for (const char* id : {"a", "b", "c"}) Enqueue(id);
  ASSERT_TRUE(executor_->WaitForBatches(3));
  const auto records = executor_->records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_THAT(Ids(records[0]), ElementsAre("a"));
  EXPECT_THAT(Ids(records[1]), ElementsAre("b"));
  EXPECT_THAT(Ids(records[2]), ElementsAre("c"));
}

TEST_F(ModelSchedulerTest, FullQueueAnswersResourceExhaustedAtOnce) {
  SchedulerOptions options = DefaultOptions();
  options.queue_policy.max_queue_size = 2;
  CreateAndStart(options, /*slots=*/0);  // nothing can leave the queue
  Enqueue("a");
  Enqueue("b");
  Enqueue("c");
  // Answered on the calling thread, before Enqueue returned.
  ASSERT_EQ(answers_.Count("c"), 1);
  const absl::Status status = answers_.StatusOf("c");
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("queue"));
  EXPECT_EQ(answers_.Count("a"), 0);
  EXPECT_EQ(answers_.Count("b"), 0);
  EXPECT_EQ(scheduler_->QueueDepth(), 2);
  EXPECT_FALSE(scheduler_->Idle());
  EXPECT_EQ(stats_.Snapshot().fail.count, 1u);
}

TEST_F(ModelSchedulerTest, DeadlinePassedInQueueAnswersDeadlineExceeded) {
  CreateAndStart(DefaultOptions(), /*slots=*/0);
  auto request = Request("a");
  request->deadline = clock_.Now() + microseconds(50);
  scheduler_->Enqueue(std::move(request));
  Enqueue("b");  // no deadline

  Advance(microseconds(60));
  ASSERT_TRUE(answers_.WaitFor("a"));
  EXPECT_EQ(answers_.StatusOf("a").code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(answers_.Count("b"), 0);

  // A slot frees and b's delay expires: only b reaches the executor.
  Advance(microseconds(100));
  executor_->AddSlots(1);
  ASSERT_TRUE(executor_->WaitForBatches(1));
  ASSERT_TRUE(executor_->records().size() == 1);
  EXPECT_THAT(Ids(executor_->records()[0]), ElementsAre("b"));
}

TEST_F(ModelSchedulerTest, DeadlinePassedWhileWaitingForABatchNeverReachesTheExecutor) {
  SchedulerOptions options = DefaultOptions();
  options.policy.max_queue_delay = microseconds(1000);
  CreateAndStart(options, /*slots=*/4);
  auto request = Request("a");
  request->deadline = clock_.Now() + microseconds(50);
  scheduler_->Enqueue(std::move(request));

  Advance(microseconds(50));
  ASSERT_TRUE(answers_.WaitFor("a"));
  EXPECT_EQ(answers_.StatusOf("a").code(), absl::StatusCode::kDeadlineExceeded);
  Advance(microseconds(2000));
  ASSERT_TRUE(scheduler_->WaitUntilBatcherSleepsForTest(kAsyncTimeout));
  EXPECT_TRUE(executor_->records().empty());
}

TEST_F(ModelSchedulerTest, DefaultTimeoutExpiresQueuedRequests) {
  SchedulerOptions options = DefaultOptions();
  options.queue_policy.default_timeout = microseconds(50);
  CreateAndStart(options, /*slots=*/0);
  Enqueue("a");
  Advance(microseconds(50));
  ASSERT_TRUE(answers_.WaitFor("a"));
  EXPECT_EQ(answers_.StatusOf("a").code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(executor_->records().empty());
}

TEST_F(ModelSchedulerTest, RequestDeadlineAppliesWithoutTimeoutOverride) {
  SchedulerOptions options = DefaultOptions();
  options.queue_policy.allow_timeout_override = false;
  CreateAndStart(options, /*slots=*/0);
  auto request = Request("a");
  request->deadline = clock_.Now() + microseconds(20);
  scheduler_->Enqueue(std::move(request));
  Advance(microseconds(20));
  ASSERT_TRUE(answers_.WaitFor("a"));
  EXPECT_EQ(answers_.StatusOf("a").code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(ModelSchedulerTest, RequestTimeoutIgnoredWithoutTimeoutOverride) {
  SchedulerOptions options = DefaultOptions();
  options.queue_policy.allow_timeout_override = false;
  CreateAndStart(options, /*slots=*/0);
  auto request = Request("a");
  request->timeout = microseconds(10);
  scheduler_->Enqueue(std::move(request));
  Advance(microseconds(100));
  ASSERT_TRUE(scheduler_->WaitUntilBatcherSleepsForTest(kAsyncTimeout));
  EXPECT_EQ(answers_.Count("a"), 0) << answers_.StatusOf("a");
  executor_->AddSlots(1);
  ASSERT_TRUE(executor_->WaitForBatches(1));
  EXPECT_THAT(Ids(executor_->records()[0]), ElementsAre("a"));
}

TEST_F(ModelSchedulerTest, RequestTimeoutReplacesDefaultTimeoutWithOverride) {
  SchedulerOptions options = DefaultOptions();
  options.queue_policy.allow_timeout_override = true;
  options.queue_policy.default_timeout = microseconds(50);
  CreateAndStart(options, /*slots=*/0);
  auto shorter = Request("shorter");
  shorter->timeout = microseconds(20);
  scheduler_->Enqueue(std::move(shorter));
  auto longer = Request("longer");
  longer->timeout = microseconds(10000);
  scheduler_->Enqueue(std::move(longer));
  Enqueue("default");

  Advance(microseconds(20));
  ASSERT_TRUE(answers_.WaitFor("shorter"));
  EXPECT_EQ(answers_.StatusOf("shorter").code(), absl::StatusCode::kDeadlineExceeded);
  Advance(microseconds(30));
  ASSERT_TRUE(answers_.WaitFor("default"));
  EXPECT_EQ(answers_.StatusOf("default").code(), absl::StatusCode::kDeadlineExceeded);
  // The longer timeout replaced the default: still queued, and it runs once a slot frees.
  EXPECT_EQ(answers_.Count("longer"), 0);
  Advance(microseconds(50));  // its batching delay is up too
  executor_->AddSlots(1);
  ASSERT_TRUE(executor_->WaitForBatches(1));
  EXPECT_THAT(Ids(executor_->records()[0]), ElementsAre("longer"));
}

TEST_F(ModelSchedulerTest, EarlierOfRequestDeadlineAndDefaultTimeoutWins) {
  SchedulerOptions options = DefaultOptions();
  options.queue_policy.default_timeout = microseconds(10000);
  CreateAndStart(options, /*slots=*/0);
  auto request = Request("a");
  request->deadline = clock_.Now() + microseconds(20);
  scheduler_->Enqueue(std::move(request));
  Advance(microseconds(20));
  ASSERT_TRUE(answers_.WaitFor("a"));
  EXPECT_EQ(answers_.StatusOf("a").code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(ModelSchedulerTest, DifferentPerItemShapesAreNeverBatchedTogether) {
  config_.inputs = {TensorSpec{"IN", DataType::kFp32, {-1}}};
  config_.outputs = {TensorSpec{"OUT", DataType::kFp32, {-1}}};
  CreateAndStart(DefaultOptions(), /*slots=*/8);
  Enqueue("a1", 1, /*width=*/2);
  Enqueue("a2", 1, /*width=*/2);
  Enqueue("b1", 1, /*width=*/3);
  Enqueue("b2", 1, /*width=*/3);
  Enqueue("a3", 1, /*width=*/2);
  Enqueue("c1", 2, /*width=*/2);
  Advance(microseconds(100));
  ASSERT_TRUE(executor_->WaitForRequests(6));

  const auto records = executor_->records();
  size_t requests = 0;
  for (const auto& record : records) {
    ASSERT_FALSE(record.shapes.empty());
    int items = 0;
    for (size_t i = 0; i < record.shapes.size(); ++i) {
      ASSERT_EQ(record.shapes[i].size(), 2u);
      items += static_cast<int>(record.shapes[i][0]);
      EXPECT_EQ(record.shapes[i][1], record.shapes[0][1])
          << "request " << record.ids[i] << " batched with " << record.ids[0];
    }
    EXPECT_EQ(items, record.items);
    requests += record.ids.size();
  }
  EXPECT_EQ(requests, 6u);
  // Compatible neighbours still share a batch.
  ASSERT_FALSE(records.empty());
  EXPECT_THAT(Ids(records[0]), ElementsAre("a1", "a2"));
}

TEST_F(ModelSchedulerTest, NoFreeSlotHoldsBatchesUntilASlotFrees) {
  CreateAndStart(DefaultOptions(), /*slots=*/1);
  for (const char* id : {"a", "b", "c", "d"}) Enqueue(id);
  ASSERT_TRUE(executor_->WaitForBatches(1));
  for (const char* id : {"e", "f", "g", "h"}) Enqueue(id);
  Advance(microseconds(1000));  // delays long expired: only the missing slot holds them
  ASSERT_TRUE(scheduler_->WaitUntilBatcherSleepsForTest(kAsyncTimeout));
  EXPECT_EQ(executor_->records().size(), 1u);
  EXPECT_EQ(scheduler_->QueueDepth(), 4);
  EXPECT_EQ(answers_.Count("e"), 0);

  executor_->FinishAll();  // answers a..d, frees the slot, notifies the scheduler
  EXPECT_EQ(answers_.StatusOf("a").code(), absl::StatusCode::kOk);
  ASSERT_TRUE(executor_->WaitForBatches(2));
  const auto records = executor_->records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_THAT(Ids(records[1]), ElementsAre("e", "f", "g", "h"));
}

TEST_F(ModelSchedulerTest, UsesEveryExecutorWithAFreeSlot) {
  Create(DefaultOptions(), /*slots=*/1);
  FakeExecutor* first = executor_;
  auto second_owned = std::make_unique<FakeExecutor>(1);
  second_owned->set_on_slot_freed([s = scheduler_.get()] { s->NotifySlotFreed(); });
  FakeExecutor* second = second_owned.get();
  pending_executors_.push_back(std::move(second_owned));
  Start();
  for (int i = 0; i < 8; ++i) Enqueue("r" + std::to_string(i));
  ASSERT_TRUE(first->WaitForBatches(1));
  ASSERT_TRUE(second->WaitForBatches(1));
  ASSERT_EQ(first->records().size(), 1u);
  ASSERT_EQ(second->records().size(), 1u);
  EXPECT_EQ(first->records()[0].items, 4);
  EXPECT_EQ(second->records()[0].items, 4);
  EXPECT_EQ(second->executes_without_slot(), 0);
}

TEST_F(ModelSchedulerTest, StopAnswersEverythingQueued) {
  SchedulerOptions options = DefaultOptions();
  options.policy.max_queue_delay = std::chrono::seconds(10);
  CreateAndStart(options, /*slots=*/1);
  executor_->set_auto_complete(true);
  for (const char* id : {"a", "b", "c", "d", "e", "f"}) Enqueue(id);
  // a..d form a full batch; e and f wait for the (10 s, never reached) delay.
  ASSERT_TRUE(executor_->WaitForBatches(1));
  EXPECT_EQ(answers_.Count("e"), 0);

  scheduler_->Stop();
  // Stop() returns only after everything queued was answered, each exactly once.
  for (const char* id : {"a", "b", "c", "d", "e", "f"}) {
    EXPECT_EQ(answers_.Count(id), 1) << id;
    EXPECT_TRUE(answers_.StatusOf(id).ok()) << id << ": " << answers_.StatusOf(id);
  }
  // e and f ran as one batch, formed without waiting for the delay.
  const auto records = executor_->records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_THAT(Ids(records[1]), ElementsAre("e", "f"));
  EXPECT_TRUE(scheduler_->Idle());
  EXPECT_EQ(scheduler_->QueueDepth(), 0);

  Enqueue("late");
  ASSERT_EQ(answers_.Count("late"), 1);
  EXPECT_EQ(answers_.StatusOf("late").code(), absl::StatusCode::kUnavailable);

  scheduler_->Stop();  // idempotent
}

TEST_F(ModelSchedulerTest, StopFinishesBatchesInFlight) {
  CreateAndStart(DefaultOptions(), /*slots=*/1);
  for (const char* id : {"a", "b", "c", "d"}) Enqueue(id);
  ASSERT_TRUE(executor_->WaitForBatches(1));
  EXPECT_EQ(answers_.Count("a"), 0);
  EXPECT_FALSE(scheduler_->Idle());
  scheduler_->Stop();  // stops the executor, which finishes what it took
  for (const char* id : {"a", "b", "c", "d"}) EXPECT_EQ(answers_.Count(id), 1) << id;
}

TEST_F(ModelSchedulerTest, StopBeforeStartAnswersQueuedRequests) {
  Create(DefaultOptions(), /*slots=*/1);
  Enqueue("a");
  Enqueue("b");
  EXPECT_EQ(answers_.Count("a"), 0);
  scheduler_->Stop();
  for (const char* id : {"a", "b"}) {
    ASSERT_EQ(answers_.Count(id), 1) << id;
    EXPECT_FALSE(answers_.StatusOf(id).ok()) << id;
  }
  Enqueue("late");
  ASSERT_EQ(answers_.Count("late"), 1);
  EXPECT_EQ(answers_.StatusOf("late").code(), absl::StatusCode::kUnavailable);
}

TEST_F(ModelSchedulerTest, IdleWhenNothingQueuedOrInFlight) {
  CreateAndStart(DefaultOptions(), /*slots=*/1);
  EXPECT_TRUE(scheduler_->Idle());
  EXPECT_EQ(scheduler_->QueueDepth(), 0);
  for (const char* id : {"a", "b", "c", "d"}) Enqueue(id);
  ASSERT_TRUE(executor_->WaitForBatches(1));
  EXPECT_FALSE(scheduler_->Idle());  // a batch is in flight
  executor_->FinishAll();
  EXPECT_TRUE(scheduler_->Idle());
}

// Execute() runs outside the queue lock: while one batch is being handed over (an executor whose
// Execute takes its time, as the CUDA executor's copies to pinned memory do), Enqueue() from
// another thread returns at once. Under the lock, the Enqueue below would wait for the gate,
// which opens only after it returned: the wait for it would time out.
TEST_F(ModelSchedulerTest, EnqueueDoesNotWaitForExecute) {
  SchedulerOptions options = DefaultOptions();
  options.policy.batching_enabled = false;
  CreateAndStart(options, /*slots=*/2);
  executor_->CloseGate();
  Enqueue("a");
  ASSERT_TRUE(executor_->WaitAtGate());

  std::mutex mu;
  std::condition_variable cv;
  bool enqueued = false;
  std::thread rpc_thread([&] {
    Enqueue("b");
    std::lock_guard<std::mutex> lock(mu);
    enqueued = true;
    cv.notify_all();
  });
  bool returned;
  {
    std::unique_lock<std::mutex> lock(mu);
    returned = cv.wait_for(lock, kAsyncTimeout, [&] { return enqueued; });
  }
  EXPECT_TRUE(returned) << "Enqueue() blocked while Execute() ran";
  executor_->OpenGate();
  rpc_thread.join();
  ASSERT_TRUE(executor_->WaitForRequests(2));
  EXPECT_EQ(answers_.Count("b"), 0);  // queued, then batched; answered by the executor later
}

// --- Priority levels (Triton's priority_levels) ------------------------------------------------

// `request` with the priority the client asked for (0: the default level).
std::unique_ptr<InferenceRequest> WithPriority(std::unique_ptr<InferenceRequest> request,
                                               uint64_t priority) {
  request->priority = priority;
  return request;
}

TEST_F(ModelSchedulerTest, PriorityLevelOneIsBatchedFirstThenArrivalOrder) {
  SchedulerOptions options = DefaultOptions();
  options.priority_levels = 3;
  options.default_priority_level = 2;
  CreateAndStart(options, /*slots=*/0);
  scheduler_->Enqueue(WithPriority(Request("low"), 3));
  scheduler_->Enqueue(WithPriority(Request("default"), 0));
  scheduler_->Enqueue(WithPriority(Request("high1"), 1));
  scheduler_->Enqueue(WithPriority(Request("too-high-a-number"), 9));  // no level 9: default
  scheduler_->Enqueue(WithPriority(Request("high2"), 1));
  EXPECT_EQ(scheduler_->QueueDepth(), 5);

  executor_->AddSlots(1);  // 5 queued: a full batch of 4 goes at once
  ASSERT_TRUE(executor_->WaitForBatches(1));
  EXPECT_THAT(Ids(executor_->records()[0]),
              ElementsAre("high1", "high2", "default", "too-high-a-number"));
  executor_->FinishAll();
  Advance(microseconds(100));
  ASSERT_TRUE(executor_->WaitForBatches(2));
  EXPECT_THAT(Ids(executor_->records()[1]), ElementsAre("low"));
}

TEST_F(ModelSchedulerTest, HigherPriorityOvertakesWhatAlreadyWaits) {
  SchedulerOptions options = DefaultOptions();
  options.policy.batching_enabled = false;
  options.priority_levels = 2;
  options.default_priority_level = 2;
  CreateAndStart(options, /*slots=*/0);
  for (const char* id : {"a", "b", "c"}) Enqueue(id);
  scheduler_->Enqueue(WithPriority(Request("urgent"), 1));
  executor_->AddSlots(1);
  ASSERT_TRUE(executor_->WaitForBatches(1));
  EXPECT_THAT(Ids(executor_->records()[0]), ElementsAre("urgent"));
  executor_->FinishAll();
  ASSERT_TRUE(executor_->WaitForBatches(2));
  EXPECT_THAT(Ids(executor_->records()[1]), ElementsAre("a"));
}

TEST_F(ModelSchedulerTest, EachPriorityLevelHasItsOwnQueueBound) {
  SchedulerOptions options = DefaultOptions();
  options.priority_levels = 2;
  options.default_priority_level = 2;
  options.queue_policy.max_queue_size = 1;  // level 2 takes the default policy
  options.level_policies[1] = QueuePolicy{.max_queue_size = 3};
  CreateAndStart(options, /*slots=*/0);
  Enqueue("bulk1");
  Enqueue("bulk2");  // level 2 is full
  ASSERT_EQ(answers_.Count("bulk2"), 1);
  EXPECT_EQ(answers_.StatusOf("bulk2").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(answers_.StatusOf("bulk2").message(), HasSubstr("at priority level 2"));
  // A full level 2 does not hold back level 1, which has room for 3.
  for (const char* id : {"vip1", "vip2", "vip3", "vip4"}) {
    scheduler_->Enqueue(WithPriority(Request(id), 1));
  }
  EXPECT_EQ(answers_.Count("vip3"), 0);
  ASSERT_EQ(answers_.Count("vip4"), 1);
  EXPECT_EQ(answers_.StatusOf("vip4").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(answers_.StatusOf("vip4").message(), HasSubstr("at priority level 1"));
  EXPECT_EQ(scheduler_->QueueDepth(), 4);
}

TEST_F(ModelSchedulerTest, EachPriorityLevelHasItsOwnTimeout) {
  SchedulerOptions options = DefaultOptions();
  options.priority_levels = 2;
  options.default_priority_level = 1;
  options.level_policies[2] = QueuePolicy{
      .max_queue_size = 4, .default_timeout = microseconds(50), .allow_timeout_override = true};
  CreateAndStart(options, /*slots=*/0);
  Enqueue("patient");  // level 1: no timeout
  scheduler_->Enqueue(WithPriority(Request("impatient"), 2));
  auto overridden = WithPriority(Request("overridden"), 2);
  overridden->timeout = microseconds(500);  // level 2 allows the override
  scheduler_->Enqueue(std::move(overridden));
  Advance(microseconds(50));
  ASSERT_TRUE(answers_.WaitFor("impatient"));
  EXPECT_EQ(answers_.StatusOf("impatient").code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(answers_.Count("patient"), 0);
  EXPECT_EQ(answers_.Count("overridden"), 0);
  Advance(microseconds(450));
  ASSERT_TRUE(answers_.WaitFor("overridden"));
  EXPECT_EQ(answers_.StatusOf("overridden").code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(answers_.Count("patient"), 0);
  EXPECT_EQ(scheduler_->QueueDepth(), 1);
}

TEST_F(ModelSchedulerTest, CreateRejectsInconsistentPriorityOptions) {
  SchedulerOptions options = DefaultOptions();
  options.priority_levels = 2;
  options.default_priority_level = 3;
  EXPECT_EQ(ModelScheduler::Create(config_, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.default_priority_level = 1;
  options.level_policies[3] = QueuePolicy{};
  EXPECT_EQ(ModelScheduler::Create(config_, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.level_policies.clear();
  options.level_policies[2] = QueuePolicy{.max_queue_size = 0};
  EXPECT_EQ(ModelScheduler::Create(config_, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- Ragged batching (sequence models: token budget instead of equal shapes) ------------------

class RaggedSchedulerTest : public ModelSchedulerTest {
 protected:
  RaggedSchedulerTest() {
    // [batch, seq] token ids of any length, as the encoder declares them.
    config_.inputs = {TensorSpec{"input_ids", DataType::kInt64, {-1}}};
    config_.outputs = {TensorSpec{"embedding", DataType::kFp32, {4}}};
    config_.ragged_batching = RaggedBatchingConfig{.max_batch_tokens = 10};
  }

  // Batching with max_batch_size 4, a 100us delay and a budget of 10 tokens.
  SchedulerOptions RaggedOptions() {
    SchedulerOptions options = DefaultOptions();
    options.policy.max_batch_tokens = config_.ragged_batching->max_batch_tokens;
    return options;
  }

  // A request of one sequence of `tokens` real tokens (what request validation sets).
  std::unique_ptr<InferenceRequest> Sequence(const std::string& id, int64_t tokens) {
    auto request = Request(id, /*batch=*/1, /*width=*/tokens);
    request->token_count = tokens;
    return request;
  }
  void EnqueueSequence(const std::string& id, int64_t tokens) {
    scheduler_->Enqueue(Sequence(id, tokens));
  }
};

TEST_F(RaggedSchedulerTest, DifferentLengthsShareABatch) {
  CreateAndStart(RaggedOptions(), /*slots=*/0);
  EnqueueSequence("a", 3);
  EnqueueSequence("b", 1);
  EnqueueSequence("c", 5);
  Advance(microseconds(100));  // the delay is up: what fits goes once a slot frees
  executor_->AddSlots(1);
  ASSERT_TRUE(executor_->WaitForBatches(1));
  const auto records = executor_->records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_THAT(Ids(records[0]), ElementsAre("a", "b", "c"));
  EXPECT_EQ(records[0].items, 3);
  EXPECT_EQ(records[0].tokens, 9);
  ASSERT_EQ(records[0].shapes.size(), 3u);
  EXPECT_EQ(records[0].shapes[0], (Shape{1, 3}));
  EXPECT_EQ(records[0].shapes[2], (Shape{1, 5}));
}

TEST_F(RaggedSchedulerTest, TokenBudgetCutsTheBatchAtOnce) {
  CreateAndStart(RaggedOptions(), /*slots=*/0);
  EnqueueSequence("a", 4);
  EnqueueSequence("b", 5);
  EnqueueSequence("c", 3);  // 4 + 5 + 3 > 10
  // The clock never moves: only the budget can dispatch a and b.
  executor_->AddSlots(2);
  ASSERT_TRUE(executor_->WaitForBatches(1));
  {
    const auto records = executor_->records();
    ASSERT_EQ(records.size(), 1u);
    EXPECT_THAT(Ids(records[0]), ElementsAre("a", "b"));
    EXPECT_EQ(records[0].tokens, 9);
  }
  EXPECT_EQ(scheduler_->QueueDepth(), 1);  // c waits for company or its delay
  Advance(microseconds(100));
  ASSERT_TRUE(executor_->WaitForBatches(2));
  const auto records = executor_->records();
  EXPECT_THAT(Ids(records[1]), ElementsAre("c"));
  EXPECT_EQ(records[1].tokens, 3);
  // Stats count the tokens of every batch handed over.
  const ModelStatsSnapshot snapshot = stats_.Snapshot();
  EXPECT_EQ(snapshot.batch_tokens.count, 2u);
  EXPECT_EQ(snapshot.batch_tokens.sum, 12.0);
}

TEST_F(RaggedSchedulerTest, SequenceAboveTheBudgetRunsAloneAndDoesNotStarve) {
  CreateAndStart(RaggedOptions(), /*slots=*/0);
  EnqueueSequence("small", 2);
  EnqueueSequence("huge", 25);  // over the 10-token budget on its own
  EnqueueSequence("tail", 2);
  executor_->AddSlots(3);
  // No clock movement: the huge one cuts small's batch and then runs alone at once.
  ASSERT_TRUE(executor_->WaitForBatches(2));
  {
    const auto records = executor_->records();
    EXPECT_THAT(Ids(records[0]), ElementsAre("small"));
    EXPECT_THAT(Ids(records[1]), ElementsAre("huge"));
    EXPECT_EQ(records[1].tokens, 25);
  }
  Advance(microseconds(100));
  ASSERT_TRUE(executor_->WaitForBatches(3));
  EXPECT_THAT(Ids(executor_->records()[2]), ElementsAre("tail"));
}

TEST_F(RaggedSchedulerTest, MaxBatchSizeBoundsSequencesUnderTheBudget) {
  CreateAndStart(RaggedOptions(), /*slots=*/0);
  for (const char* id : {"a", "b", "c", "d", "e"}) EnqueueSequence(id, 1);
  executor_->AddSlots(1);  // 5 tokens fit the budget, 5 sequences do not fit max_batch_size 4
  ASSERT_TRUE(executor_->WaitForBatches(1));
  EXPECT_THAT(Ids(executor_->records()[0]), ElementsAre("a", "b", "c", "d"));
  EXPECT_EQ(executor_->records()[0].tokens, 4);
}

TEST_F(RaggedSchedulerTest, PriorityLevelsFillTheBudgetInServiceOrder) {
  SchedulerOptions options = RaggedOptions();
  options.priority_levels = 2;
  options.default_priority_level = 2;
  CreateAndStart(options, /*slots=*/0);
  EnqueueSequence("bulk", 4);
  scheduler_->Enqueue(WithPriority(Sequence("vip1", 3), 1));
  scheduler_->Enqueue(WithPriority(Sequence("vip2", 4), 1));
  // Service order vip1, vip2, bulk: 3 + 4 + 4 > 10, so bulk is cut off and waits.
  executor_->AddSlots(2);
  ASSERT_TRUE(executor_->WaitForBatches(1));
  EXPECT_THAT(Ids(executor_->records()[0]), ElementsAre("vip1", "vip2"));
  Advance(microseconds(100));
  ASSERT_TRUE(executor_->WaitForBatches(2));
  EXPECT_THAT(Ids(executor_->records()[1]), ElementsAre("bulk"));
}

TEST_F(RaggedSchedulerTest, TimeoutAndCancellationWorkInTheQueue) {
  SchedulerOptions options = RaggedOptions();
  options.queue_policy.default_timeout = microseconds(50);
  options.queue_policy.allow_timeout_override = true;
  CreateAndStart(options, /*slots=*/0);
  EnqueueSequence("expires", 3);
  auto cancelled_flag = std::make_shared<std::atomic<bool>>(false);
  auto cancellable = Sequence("cancelled", 4);
  cancellable->cancelled = cancelled_flag;
  cancellable->timeout = microseconds(10000);
  scheduler_->Enqueue(std::move(cancellable));
  auto patient = Sequence("patient", 5);
  patient->timeout = microseconds(10000);
  scheduler_->Enqueue(std::move(patient));

  Advance(microseconds(50));
  ASSERT_TRUE(answers_.WaitFor("expires"));
  EXPECT_EQ(answers_.StatusOf("expires").code(), absl::StatusCode::kDeadlineExceeded);
  cancelled_flag->store(true);
  // The cancel sweep runs within kCancelSweepPeriod of scheduler time.
  Advance(std::chrono::duration_cast<microseconds>(ModelScheduler::kCancelSweepPeriod));
  ASSERT_TRUE(answers_.WaitFor("cancelled"));
  EXPECT_EQ(answers_.StatusOf("cancelled").code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(answers_.Count("patient"), 0);

  // Only the survivor reaches the executor, with its own tokens.
  executor_->AddSlots(1);
  ASSERT_TRUE(executor_->WaitForBatches(1));
  const auto records = executor_->records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_THAT(Ids(records[0]), ElementsAre("patient"));
  EXPECT_EQ(records[0].tokens, 5);
}

TEST_F(RaggedSchedulerTest, StopDrainsEverythingQueuedWithinTheBudget) {
  SchedulerOptions options = RaggedOptions();
  options.policy.max_queue_delay = std::chrono::seconds(10);
  CreateAndStart(options, /*slots=*/1);
  executor_->set_auto_complete(true);
  executor_->CloseGate();
  EnqueueSequence("a", 6);
  EnqueueSequence("b", 6);  // cuts a's batch: a goes, then waits at the gate in Execute
  ASSERT_TRUE(executor_->WaitAtGate());
  EnqueueSequence("c", 3);
  EnqueueSequence("d", 2);
  // Stop on another thread: it drains the queue once the gate opens.
  std::thread stopper([this] { scheduler_->Stop(); });
  executor_->OpenGate();
  stopper.join();
  for (const char* id : {"a", "b", "c", "d"}) {
    ASSERT_EQ(answers_.Count(id), 1) << id;
    EXPECT_TRUE(answers_.StatusOf(id).ok()) << id << ": " << answers_.StatusOf(id);
  }
  // b, c and d (11 tokens) do not fit one batch; the drain formed batches without the delay.
  const auto records = executor_->records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_THAT(Ids(records[0]), ElementsAre("a"));
  EXPECT_THAT(Ids(records[1]), ElementsAre("b", "c"));
  EXPECT_THAT(Ids(records[2]), ElementsAre("d"));
}

// --- Work-conserving batching (max_queue_delay 0) and the dispatch shortcut --------------------

class WorkConservingTest : public ModelSchedulerTest {
 protected:
  // Batching with max_batch_size 4, no delay (sluice's default), a queue of 16.
  SchedulerOptions WorkConservingOptions() {
    SchedulerOptions options = DefaultOptions();
    options.policy.max_queue_delay = microseconds(0);
    return options;
  }
};

TEST_F(WorkConservingTest, LoneRequestGoesAtOnceToAnIdleExecutor) {
  CreateAndStart(WorkConservingOptions(), /*slots=*/2);
  Enqueue("a");
  // The fake clock never moves: no delay is waited out.
  ASSERT_TRUE(executor_->WaitForBatches(1));
  const auto records = executor_->records();
  EXPECT_THAT(Ids(records[0]), ElementsAre("a"));
  // This executor's Execute() is not a mere push (ExecuteOnlyEnqueues() false): the batcher
  // thread dispatched, not the enqueuing one.
  EXPECT_NE(records[0].thread, std::this_thread::get_id());
}

TEST_F(WorkConservingTest, BatchGrowsWhileTheExecutorIsBusyThenGoesWhenItIsIdle) {
  CreateAndStart(WorkConservingOptions(), /*slots=*/2);
  Enqueue("a");
  ASSERT_TRUE(executor_->WaitForBatches(1));  // a is in flight: the executor is busy
  Enqueue("b");
  Enqueue("c");
  executor_->FinishAll();  // a answered: the executor is idle, b and c go together
  ASSERT_TRUE(executor_->WaitForBatches(2));
  const auto records = executor_->records();
  ASSERT_EQ(records.size(), 2u);
  // Had b gone into the free second slot on its own, this batch would be [b].
  EXPECT_THAT(Ids(records[1]), ElementsAre("b", "c"));
}

TEST_F(WorkConservingTest, FullBatchGoesIntoTheFreeSlotOfABusyExecutor) {
  CreateAndStart(WorkConservingOptions(), /*slots=*/2);
  Enqueue("a");
  ASSERT_TRUE(executor_->WaitForBatches(1));
  for (const char* id : {"b", "c", "d", "e"}) Enqueue(id);
  // a is still in flight; b..e fill max_batch_size 4 and are staged in the second slot.
  ASSERT_TRUE(executor_->WaitForBatches(2));
  EXPECT_THAT(Ids(executor_->records()[1]), ElementsAre("b", "c", "d", "e"));
  EXPECT_EQ(answers_.Count("a"), 0);
}

TEST_F(WorkConservingTest, EnqueuingThreadHandsALoneRequestToAnIdleExecutor) {
  Create(WorkConservingOptions(), /*slots=*/2);
  executor_->set_execute_only_enqueues(true);
  Start();
  Enqueue("a");
  // Dispatched before Enqueue returned, on this thread: no hop through the batcher.
  {
    const auto records = executor_->records();
    ASSERT_EQ(records.size(), 1u);
    EXPECT_THAT(Ids(records[0]), ElementsAre("a"));
    EXPECT_EQ(records[0].thread, std::this_thread::get_id());
    EXPECT_EQ(records[0].items, 1);
  }
  // The executor is busy now: b queues (the policy lets it wait), and the batcher sends it once
  // the executor is idle again.
  Enqueue("b");
  EXPECT_EQ(scheduler_->QueueDepth(), 1);
  executor_->FinishAll();
  ASSERT_TRUE(executor_->WaitForBatches(2));
  const auto records = executor_->records();
  EXPECT_THAT(Ids(records[1]), ElementsAre("b"));
  EXPECT_NE(records[1].thread, std::this_thread::get_id());
  EXPECT_EQ(answers_.StatusOf("a").code(), absl::StatusCode::kOk);
}

TEST_F(WorkConservingTest, NoShortcutWhenTheModelAsksForAQueueDelay) {
  Create(DefaultOptions(), /*slots=*/2);  // max_queue_delay 100us: Triton's meaning
  executor_->set_execute_only_enqueues(true);
  Start();
  Enqueue("a");
  EXPECT_TRUE(executor_->records().empty());
  EXPECT_EQ(scheduler_->QueueDepth(), 1);
  Advance(microseconds(100));
  ASSERT_TRUE(executor_->WaitForBatches(1));
  EXPECT_NE(executor_->records()[0].thread, std::this_thread::get_id());
}

TEST_F(WorkConservingTest, NoShortcutForAnExpiredRequest) {
  Create(WorkConservingOptions(), /*slots=*/2);
  executor_->set_execute_only_enqueues(true);
  Start();
  Enqueue("first");
  ASSERT_EQ(executor_->records().size(), 1u);  // dispatched on this thread
  executor_->FinishAll();                      // idle again
  // An expired request never runs, shortcut or not.
  auto expired = Request("expired");
  expired->deadline = clock_.Now();
  scheduler_->Enqueue(std::move(expired));
  ASSERT_TRUE(answers_.WaitFor("expired"));
  EXPECT_EQ(answers_.StatusOf("expired").code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(executor_->records().size(), 1u);
}

TEST_F(WorkConservingTest, StopWaitsForADispatchOnTheEnqueuingThread) {
  Create(WorkConservingOptions(), /*slots=*/2);
  // An executor that claims to only enqueue but holds Execute() at the gate, so that Stop() is
  // called while the RPC thread is inside it.
  executor_->set_execute_only_enqueues(true);
  executor_->set_auto_complete(true);
  Start();
  executor_->CloseGate();
  std::thread rpc_thread([this] { Enqueue("a"); });
  ASSERT_TRUE(executor_->WaitAtGate());
  std::thread stopper([this] { scheduler_->Stop(); });
  executor_->OpenGate();
  rpc_thread.join();
  stopper.join();
  EXPECT_EQ(answers_.Count("a"), 1);
  EXPECT_TRUE(answers_.StatusOf("a").ok());
  EXPECT_EQ(executor_->stops_during_execute(), 0);
}

// --- An executor whose Execute() runs the batch: the batcher thread computes and answers ------

class BatcherRunsBatchTest : public WorkConservingTest {
 protected:
  // One executor that runs and answers each batch inside Execute() (held at the gate while the
  // test closes it), as the CPU executor of a one-instance model does on the batcher thread.
  void CreateRunning(SchedulerOptions options) {
    Create(options, /*slots=*/2);
    executor_->set_execute_runs_batch(true);
    executor_->set_auto_complete(true);
    Start();
  }
};

TEST_F(BatcherRunsBatchTest, RequestsQueuedWhileABatchRunsFormTheNextOnTheSameThread) {
  CreateRunning(WorkConservingOptions());
  executor_->CloseGate();
  Enqueue("a");  // not handed over on this thread: this Execute() is no mere push
  ASSERT_TRUE(executor_->WaitAtGate());
  for (const char* id : {"b", "c", "d"}) Enqueue(id);
  EXPECT_EQ(scheduler_->QueueDepth(), 3);
  // Busy, and said at once: Idle() does not wait for a batch that runs inside Execute().
  auto idle = std::async(std::launch::async, [this] { return scheduler_->Idle(); });
  ASSERT_EQ(idle.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "Idle() waited for the batch running on the batcher thread";
  EXPECT_FALSE(idle.get());
  executor_->OpenGate();
  ASSERT_TRUE(executor_->WaitForBatches(2));
  ASSERT_TRUE(answers_.WaitFor("d"));
  const auto records = executor_->records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_THAT(Ids(records[0]), ElementsAre("a"));
  EXPECT_THAT(Ids(records[1]), ElementsAre("b", "c", "d"));
  EXPECT_NE(records[0].thread, std::this_thread::get_id());
  EXPECT_EQ(records[1].thread, records[0].thread);  // the batcher, which ran a too
  for (const char* id : {"a", "b", "c", "d"}) {
    EXPECT_EQ(answers_.StatusOf(id).code(), absl::StatusCode::kOk) << id;
  }
  // The answers come from inside Execute(): idle once the batcher is back asleep, not before.
  ASSERT_TRUE(scheduler_->WaitUntilBatcherSleepsForTest(kAsyncTimeout));
  EXPECT_TRUE(scheduler_->Idle());
}

// While the batcher runs a batch it sweeps nothing; once the batch is done, a request whose
// deadline passed meanwhile is answered DEADLINE_EXCEEDED and one cancelled meanwhile CANCELLED,
// neither ever runs, and the next batch takes the rest in priority order.
TEST_F(BatcherRunsBatchTest, PrioritiesDeadlinesAndCancellationHoldAcrossABatchRun) {
  SchedulerOptions options = WorkConservingOptions();
  options.priority_levels = 2;
  options.default_priority_level = 2;
  CreateRunning(options);
  executor_->CloseGate();
  Enqueue("a");
  ASSERT_TRUE(executor_->WaitAtGate());
  auto late = Request("late");
  late->deadline = clock_.Now() + microseconds(50);
  scheduler_->Enqueue(std::move(late));
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  auto gone = Request("gone");
  gone->cancelled = cancelled;
  scheduler_->Enqueue(std::move(gone));
  Enqueue("low");  // the default level, 2
  auto high = Request("high");
  high->priority = 1;
  scheduler_->Enqueue(std::move(high));
  cancelled->store(true);
  clock_.Advance(microseconds(100));  // late's deadline passes while a runs
  executor_->OpenGate();
  ASSERT_TRUE(answers_.WaitFor("late"));
  ASSERT_TRUE(answers_.WaitFor("gone"));
  ASSERT_TRUE(answers_.WaitFor("low"));
  EXPECT_EQ(answers_.StatusOf("late").code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(answers_.StatusOf("gone").code(), absl::StatusCode::kCancelled);
  const auto records = executor_->records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_THAT(Ids(records[1]), ElementsAre("high", "low"));
}

// Stop() while the batcher runs a batch: that batch is answered, then everything queued runs (no
// delay is waited out), all on the batcher thread, before the executor is stopped.
TEST_F(BatcherRunsBatchTest, StopRunsEverythingQueuedAfterTheRunningBatch) {
  SchedulerOptions options = DefaultOptions();  // a 100us delay the fake clock never reaches
  CreateRunning(options);
  executor_->CloseGate();
  for (const char* id : {"a", "b", "c", "d"}) Enqueue(id);  // a full batch goes at once
  ASSERT_TRUE(executor_->WaitAtGate());
  Enqueue("e");
  Enqueue("f");
  std::thread stopper([this] { scheduler_->Stop(); });
  executor_->OpenGate();
  stopper.join();
  for (const char* id : {"a", "b", "c", "d", "e", "f"}) {
    EXPECT_EQ(answers_.StatusOf(id).code(), absl::StatusCode::kOk) << id;
  }
  const auto records = executor_->records();
  ASSERT_GE(records.size(), 2u);
  EXPECT_THAT(Ids(records.back()), ElementsAre("e", "f"));
  EXPECT_EQ(executor_->stops_during_execute(), 0);
}

}  // namespace
}  // namespace sluice::engine
