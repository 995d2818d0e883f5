// The Engine's queues and its end: per-model stats, the queue bound, deadlines and cancellation
// in the queue, drain (new requests refused, queued ones finished), WaitIdle, Shutdown and
// destruction answering everything queued.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/engine.h"
#include "engine/model_scheduler.h"
#include "gtest/gtest.h"
#include "tests/support/engine/answer.h"
#include "tests/support/engine/engine_test_util.h"

namespace sluice::engine {
namespace {

using ::sluice::engine::testing::Answer;
using ::sluice::engine::testing::EngineTest;
using ::sluice::engine::testing::FromBytes;
using ::sluice::engine::testing::IdentityConfig;
using ::sluice::engine::testing::Infer;
using ::sluice::engine::testing::InputData;
using ::sluice::engine::testing::kAsyncTimeout;
using ::sluice::engine::testing::MakeRequest;
using ::sluice::engine::testing::SimpleConfig;
using ::sluice::engine::testing::SimpleInputs;
using ::sluice::engine::testing::Spec;
using ::sluice::engine::testing::ToBytes;
using std::chrono::microseconds;

// --- Stats --------------------------------------------------------------------------------------

TEST_F(EngineTest, GetStatsCountsItemsRequestsAndFailures) {
  Load(Spec(SimpleConfig()));
  Load(Spec(SimpleConfig("other")));
  for (int batch : {1, 2, 3}) {
    ASSERT_TRUE(Infer(*engine_, "simple", -1, SimpleInputs(batch)).ok());
  }
  std::vector<InputData> invalid = SimpleInputs(1);
  invalid[0].dtype = DataType::kFp32;
  EXPECT_FALSE(Infer(*engine_, "simple", -1, std::move(invalid)).ok());

  absl::StatusOr<std::vector<Engine::VersionStats>> stats = engine_->GetStats("simple", -1);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 1u);
  const ModelStatsSnapshot& s = (*stats)[0].stats;
  EXPECT_EQ(s.inference_count, 6u);
  EXPECT_EQ(s.execution_count, 3u);  // no dynamic batching: each request ran alone
  EXPECT_EQ(s.success.count, 3u);
  EXPECT_EQ(s.fail.count, 1u);
  EXPECT_GT(s.last_inference_ms, 0u);
  EXPECT_EQ(s.batch_stats.size(), 3u);
  for (uint64_t size : {1u, 2u, 3u}) {
    ASSERT_EQ(s.batch_stats.count(size), 1u) << size;
    EXPECT_EQ(s.batch_stats.at(size).compute_infer.count, 1u) << size;
  }

  absl::StatusOr<std::vector<Engine::VersionStats>> other = engine_->GetStats("other", 1);
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_EQ(other->size(), 1u);
  EXPECT_EQ((*other)[0].stats.inference_count, 0u);

  absl::StatusOr<std::vector<Engine::VersionStats>> all = engine_->GetStats("", -1);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 2u);

  EXPECT_EQ(engine_->GetStats("nope", -1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine_->GetStats("simple", 4).status().code(), absl::StatusCode::kNotFound);
}

// --- Queue limits and deadlines -----------------------------------------------------------------

TEST_F(EngineTest, FullQueueIsResourceExhausted) {
  UseFakeClock();
  ModelConfig config = IdentityConfig("id", DataType::kFp32, {2}, 8, microseconds(100));
  config.queue_policy.max_queue_size = 2;
  Load(Spec(config));
  std::vector<std::shared_ptr<Answer>> answers;
  for (int i = 0; i < 3; ++i) {
    answers.push_back(std::make_shared<Answer>());
    engine_->Submit(MakeRequest(
        "id", -1, {{"INPUT0", DataType::kFp32, {1, 2}, ToBytes(std::vector<float>{1.0f, 2.0f})}},
        Answer::Into(answers.back())));
  }
  ASSERT_EQ(answers[2]->count(), 1);
  EXPECT_EQ(answers[2]->result().status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(answers[0]->count(), 0);
  EXPECT_EQ(answers[1]->count(), 0);

  absl::StatusOr<std::vector<Engine::VersionStats>> stats = engine_->GetStats("id", -1);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ((*stats)[0].stats.queue_depth, 2u);

  clock_.Advance(microseconds(100));  // the batching delay expires
  ASSERT_TRUE(answers[0]->Wait(kAsyncTimeout));
  ASSERT_TRUE(answers[1]->Wait(kAsyncTimeout));
  EXPECT_TRUE(answers[0]->result().ok());
  EXPECT_TRUE(answers[1]->result().ok());
}

TEST_F(EngineTest, RequestDeadlinePassedInQueueIsDeadlineExceeded) {
  UseFakeClock();
  Load(Spec(IdentityConfig("id", DataType::kFp32, {2}, 8, microseconds(1000))));
  auto answer = std::make_shared<Answer>();
  auto request = MakeRequest(
      "id", -1, {{"INPUT0", DataType::kFp32, {1, 2}, ToBytes(std::vector<float>{1, 2})}},
      Answer::Into(answer));
  request->deadline = clock_.Now() + microseconds(50);
  engine_->Submit(std::move(request));
  clock_.Advance(microseconds(50));
  ASSERT_TRUE(answer->Wait(kAsyncTimeout));
  EXPECT_EQ(answer->result().status().code(), absl::StatusCode::kDeadlineExceeded);
  absl::StatusOr<std::vector<Engine::VersionStats>> stats = engine_->GetStats("id", -1);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ((*stats)[0].stats.execution_count, 0u);
}

TEST_F(EngineTest, CancelledQueuedRequestLeavesTheQueueWithoutRunning) {
  UseFakeClock();
  // A long batching delay keeps both requests queued until the test moves the clock.
  Load(Spec(IdentityConfig("id", DataType::kFp32, {2}, 8, microseconds(1'000'000))));
  auto cancelled_flag = std::make_shared<std::atomic<bool>>(false);
  auto cancelled = std::make_shared<Answer>();
  auto kept = std::make_shared<Answer>();
  auto request = MakeRequest(
      "id", -1, {{"INPUT0", DataType::kFp32, {1, 2}, ToBytes(std::vector<float>{1, 2})}},
      Answer::Into(cancelled));
  request->cancelled = cancelled_flag;
  engine_->Submit(std::move(request));
  engine_->Submit(MakeRequest(
      "id", -1, {{"INPUT0", DataType::kFp32, {1, 2}, ToBytes(std::vector<float>{3, 4})}},
      Answer::Into(kept)));
  cancelled_flag->store(true);
  clock_.Advance(ModelScheduler::kCancelSweepPeriod);
  ASSERT_TRUE(cancelled->Wait(kAsyncTimeout));
  EXPECT_EQ(cancelled->result().status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(kept->count(), 0);  // still waiting for its batch: only the cancelled one left

  absl::StatusOr<std::vector<Engine::VersionStats>> stats = engine_->GetStats("id", -1);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ((*stats)[0].stats.queue_depth, 1u);
  EXPECT_EQ((*stats)[0].stats.failures_by_reason[static_cast<size_t>(FailureReason::kCancelled)],
            1u);

  clock_.Advance(microseconds(1'000'000));
  ASSERT_TRUE(kept->Wait(kAsyncTimeout));
  ASSERT_TRUE(kept->result().ok()) << kept->result().status();
  EXPECT_EQ(FromBytes<float>(kept->result()->outputs[0].data), (std::vector<float>{3, 4}));
  stats = engine_->GetStats("id", -1);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ((*stats)[0].stats.execution_count, 1u);  // the cancelled request never ran
}

// --- Drain and shutdown -------------------------------------------------------------------------

TEST_F(EngineTest, DrainRefusesNewRequestsAndFinishesQueuedOnes) {
  UseFakeClock();
  Load(Spec(IdentityConfig("id", DataType::kFp32, {2}, 8, microseconds(100))));
  std::vector<std::shared_ptr<Answer>> queued;
  for (int i = 0; i < 2; ++i) {
    queued.push_back(std::make_shared<Answer>());
    engine_->Submit(MakeRequest(
        "id", -1,
        {{"INPUT0", DataType::kFp32, {1, 2}, ToBytes(std::vector<float>{float(i), 0.5f})}},
        Answer::Into(queued.back())));
  }
  EXPECT_FALSE(engine_->draining());
  engine_->BeginDrain();
  EXPECT_TRUE(engine_->draining());

  auto refused = std::make_shared<Answer>();
  engine_->Submit(MakeRequest(
      "id", -1, {{"INPUT0", DataType::kFp32, {1, 2}, ToBytes(std::vector<float>{9, 9})}},
      Answer::Into(refused)));
  ASSERT_EQ(refused->count(), 1);
  EXPECT_EQ(refused->result().status().code(), absl::StatusCode::kUnavailable);

  EXPECT_FALSE(engine_->WaitIdle(std::chrono::milliseconds(30)));  // still queued
  clock_.Advance(microseconds(100));
  EXPECT_TRUE(engine_->WaitIdle(kAsyncTimeout));
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(queued[i]->count(), 1);
    absl::StatusOr<InferenceResponse> response = queued[i]->result();
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(FromBytes<float>(response->outputs[0].data), std::vector<float>({float(i), 0.5f}));
  }
}

// A Submit that passed the drain check before BeginDrain is still on its way to the queue when
// the drain looks: WaitIdle must wait for it, and it must be served (not refused by the queue
// that Shutdown stops after an idle WaitIdle).
TEST_F(EngineTest, DrainWaitsForASubmitAlreadyPastTheDrainCheck) {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false;
  bool release = false;
  EngineOptions options;
  options.during_submit_for_test = [&] {
    std::unique_lock lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  };
  engine_ = CreateEngine(options);
  Load(Spec(IdentityConfig("id", DataType::kFp32, {2}, 8)));

  auto answer = std::make_shared<Answer>();
  std::thread submitter([&] {
    engine_->Submit(MakeRequest(
        "id", -1, {{"INPUT0", DataType::kFp32, {1, 2}, ToBytes(std::vector<float>{7, 8})}},
        Answer::Into(answer)));
  });
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, kAsyncTimeout, [&] { return entered; }));
  }
  engine_->BeginDrain();
  EXPECT_FALSE(engine_->WaitIdle(std::chrono::milliseconds(30)));  // the Submit is not done
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_TRUE(engine_->WaitIdle(kAsyncTimeout));
  submitter.join();
  engine_->Shutdown();
  ASSERT_EQ(answer->count(), 1);
  absl::StatusOr<InferenceResponse> response = answer->result();
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(FromBytes<float>(response->outputs[0].data), std::vector<float>({7, 8}));
}

TEST_F(EngineTest, WaitIdleTrueWhenAllAnswered) {
  Load(Spec(SimpleConfig()));
  EXPECT_TRUE(engine_->WaitIdle(std::chrono::milliseconds(0)));
  std::vector<std::shared_ptr<Answer>> answers;
  for (int i = 0; i < 20; ++i) {
    answers.push_back(std::make_shared<Answer>());
    engine_->Submit(MakeRequest("simple", -1, SimpleInputs(1), Answer::Into(answers.back())));
  }
  EXPECT_TRUE(engine_->WaitIdle(kAsyncTimeout));
  for (const auto& answer : answers) {
    EXPECT_EQ(answer->count(), 1);
  }
}

TEST_F(EngineTest, ShutdownAnswersEverythingQueued) {
  UseFakeClock();
  Load(Spec(IdentityConfig("a", DataType::kFp32, {2}, 8, microseconds(100))));
  Load(Spec(IdentityConfig("b", DataType::kFp32, {-1}, 8, microseconds(100))));
  std::vector<std::shared_ptr<Answer>> answers;
  for (int i = 0; i < 5; ++i) {
    for (const char* model : {"a", "b"}) {
      answers.push_back(std::make_shared<Answer>());
      engine_->Submit(MakeRequest(
          model, -1,
          {{"INPUT0", DataType::kFp32, {1, 2}, ToBytes(std::vector<float>{float(i), 1.0f})}},
          Answer::Into(answers.back())));
    }
  }
  for (const auto& answer : answers) EXPECT_EQ(answer->count(), 0);

  engine_->Shutdown();
  for (size_t i = 0; i < answers.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(answers[i]->count(), 1);
    EXPECT_TRUE(answers[i]->result().ok()) << answers[i]->result().status();
  }
  absl::StatusOr<InferenceResponse> late =
      Infer(*engine_, "a", -1,
            {{"INPUT0", DataType::kFp32, {1, 2}, ToBytes(std::vector<float>{1.0f, 1.0f})}});
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable);
  engine_->Shutdown();  // idempotent
}

TEST_F(EngineTest, DestroyingTheEngineAnswersEverything) {
  UseFakeClock();
  Load(Spec(IdentityConfig("a", DataType::kFp32, {2}, 8, microseconds(100))));
  auto answer = std::make_shared<Answer>();
  engine_->Submit(
      MakeRequest("a", -1, {{"INPUT0", DataType::kFp32, {1, 2}, ToBytes(std::vector<float>{3, 4})}},
                  Answer::Into(answer)));
  engine_.reset();
  EXPECT_EQ(answer->count(), 1);
}

}  // namespace
}  // namespace sluice::engine
