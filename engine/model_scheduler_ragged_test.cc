// ModelScheduler ragged batching (sequence models): a token budget instead of equal shapes.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
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
using ::sluice::engine::testing::ModelSchedulerTest;
using ::sluice::engine::testing::WithPriority;
using std::chrono::microseconds;
using ::testing::ElementsAre;

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

}  // namespace
}  // namespace sluice::engine
