// ModelScheduler work-conserving batching (max_queue_delay 0), the dispatch shortcut on the
// enqueuing thread, and executors whose Execute() runs the batch on the batcher thread.

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "engine/model_scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/engine/model_scheduler_test_util.h"

namespace sluice::engine {
namespace {

using ::sluice::engine::testing::Ids;
using ::sluice::engine::testing::kAsyncTimeout;
using ::sluice::engine::testing::ModelSchedulerTest;
using std::chrono::microseconds;
using ::testing::ElementsAre;

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
