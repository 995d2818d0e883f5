// ModelScheduler (the batcher in front of a model's executors): the batching delay and full
// batches, the queue bound, deadlines and timeouts in the queue, per-item shapes, executor slots,
// Stop, idleness, an Enqueue that never waits for Execute. Priority levels, ragged batching and
// work-conserving dispatch have files of their own (model_scheduler_*_test.cc); the fake executor
// and the fixture are in tests/support/engine/model_scheduler_test_util.h.

#include "engine/model_scheduler.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/engine/model_scheduler_test_util.h"

namespace sluice::engine {
namespace {

using ::sluice::engine::testing::FakeExecutor;
using ::sluice::engine::testing::Ids;
using ::sluice::engine::testing::kAsyncTimeout;
using ::sluice::engine::testing::ModelSchedulerTest;
using std::chrono::microseconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

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

}  // namespace
}  // namespace sluice::engine
