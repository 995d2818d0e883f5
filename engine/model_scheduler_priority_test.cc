// ModelScheduler priority levels (Triton's priority_levels): level 1 is batched first, then
// arrival order; each level has its own queue bound and timeout.

#include <chrono>
#include <string>
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
using ::testing::HasSubstr;

// --- Priority levels (Triton's priority_levels) ------------------------------------------------

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

}  // namespace
}  // namespace sluice::engine
