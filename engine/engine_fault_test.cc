// Executor faults through the Engine (ExecutorOptions::on_fault): a faulted version is
// UNAVAILABLE until reloaded, its queue is answered, a process-fatal fault stops every model;
// instance groups run batches concurrently; the SLUICE_TEST_FAULT_INJECT spec; sticky CUDA codes.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/device_fault.h"
#include "engine/engine.h"
#include "engine/fault_injection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/engine/answer.h"
#include "tests/support/engine/engine_test_util.h"

namespace sluice::engine {
namespace {

using ::sluice::engine::testing::Answer;
using ::sluice::engine::testing::EngineTest;
using ::sluice::engine::testing::FindStatus;
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
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// --- Executor faults (ExecutorOptions::on_fault) and instance groups -----------------------------

// Polls `done` until it holds or kAsyncTimeout passes. The fault marks the version not ready on
// the executor's thread just after the faulted batch was answered, so tests wait for it.
bool Eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + kAsyncTimeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST_F(EngineTest, ExecutorFaultMakesTheVersionUnavailableUntilReloaded) {
  auto fault_next = std::make_shared<std::atomic<bool>>(false);
  EngineOptions options;
  options.before_batch_for_test = [fault_next](absl::string_view model, int64_t,
                                               int) -> absl::Status {
    if (model == "simple" && fault_next->exchange(false)) {
      return absl::InternalError("cudaGraphLaunch: an illegal memory access was encountered");
    }
    return absl::OkStatus();
  };
  engine_ = CreateEngine(options);
  Load(Spec(SimpleConfig("simple")));
  Load(Spec(IdentityConfig("identity", DataType::kFp32, {2}, 8)));
  ASSERT_TRUE(Infer(*engine_, "simple", -1, SimpleInputs(1)).ok());

  fault_next->store(true);
  absl::StatusOr<InferenceResponse> failed = Infer(*engine_, "simple", -1, SimpleInputs(2));
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr("model 'simple': injected test fault: cudaGraphLaunch"));

  ASSERT_TRUE(Eventually([&] { return !engine_->IsModelReady("simple", -1); }));
  EXPECT_FALSE(engine_->IsModelReady("simple", 1));
  std::vector<ModelVersionStatus> list = engine_->ListModels();
  const ModelVersionStatus* status = FindStatus(list, "simple", 1);
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(status->state, ModelState::kUnavailable);
  EXPECT_THAT(status->reason, HasSubstr("instance 0 faulted"));
  EXPECT_THAT(status->reason, HasSubstr("cudaGraphLaunch"));
  EXPECT_EQ(engine_->GetModel("simple", -1).status().code(), absl::StatusCode::kUnavailable);

  absl::StatusOr<InferenceResponse> refused = Infer(*engine_, "simple", -1, SimpleInputs(1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("model 'simple' version 1 is not ready: instance 0 faulted"));
  EXPECT_EQ(Infer(*engine_, "simple", 1, SimpleInputs(1)).status().code(),
            absl::StatusCode::kUnavailable);

  // The other model keeps serving.
  const std::vector<float> values = {1.5f, -2.5f};
  absl::StatusOr<InferenceResponse> other =
      Infer(*engine_, "identity", -1, {{"INPUT0", DataType::kFp32, {1, 2}, ToBytes(values)}});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(FromBytes<float>(other->outputs[0].data), values);
  EXPECT_TRUE(engine_->IsModelReady("identity", -1));

  // The faulted version's stats still report, with the reasons counted.
  absl::StatusOr<std::vector<Engine::VersionStats>> stats = engine_->GetStats("simple", -1);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 1u);
  const ModelStatsSnapshot& snapshot = (*stats)[0].stats;
  EXPECT_EQ(snapshot.failures_by_reason[static_cast<size_t>(FailureReason::kInternal)], 1u);
  EXPECT_EQ(snapshot.failures_by_reason[static_cast<size_t>(FailureReason::kUnavailable)], 2u);
  EXPECT_EQ(snapshot.inference_count, 1u);

  // A reload recovers it.
  Load(Spec(SimpleConfig("simple")));
  EXPECT_TRUE(engine_->IsModelReady("simple", -1));
  list = engine_->ListModels();
  status = FindStatus(list, "simple", 1);
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(status->state, ModelState::kReady);
  EXPECT_TRUE(status->reason.empty());
  std::mt19937 rng(7);
  std::vector<int32_t> a, b;
  absl::StatusOr<InferenceResponse> recovered =
      Infer(*engine_, "simple", -1, SimpleInputs(3, rng, &a, &b));
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  ExpectSimpleOutputs(*recovered, 3, a, b);
}

// Requests waiting in the faulted model's queue are answered UNAVAILABLE, not lost.
TEST_F(EngineTest, QueuedRequestsAreAnsweredWhenTheModelFaults) {
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool entered = false;
    bool open = false;
    int calls = 0;
  };
  auto gate = std::make_shared<Gate>();
  EngineOptions options;
  options.executor_slots = 1;  // the held batch holds the only slot: the others must queue
  options.before_batch_for_test = [gate](absl::string_view, int64_t, int) -> absl::Status {
    std::unique_lock<std::mutex> lock(gate->mu);
    if (gate->calls++ > 0) return absl::OkStatus();
    gate->entered = true;
    gate->cv.notify_all();
    gate->cv.wait(lock, [&] { return gate->open; });
    return absl::InternalError("device lost");
  };
  engine_ = CreateEngine(options);
  Load(Spec(SimpleConfig("simple")));

  std::vector<std::shared_ptr<Answer>> answers;
  auto submit = [&] {
    answers.push_back(std::make_shared<Answer>());
    engine_->Submit(MakeRequest("simple", -1, SimpleInputs(1), Answer::Into(answers.back())));
  };
  submit();
  {
    std::unique_lock<std::mutex> lock(gate->mu);
    ASSERT_TRUE(gate->cv.wait_for(lock, kAsyncTimeout, [&] { return gate->entered; }));
  }
  for (int i = 0; i < 3; ++i) submit();
  {
    std::lock_guard<std::mutex> lock(gate->mu);
    gate->open = true;
    gate->cv.notify_all();
  }
  for (size_t i = 0; i < answers.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(answers[i]->Wait(kAsyncTimeout));
    EXPECT_EQ(answers[i]->count(), 1);
    const absl::StatusCode expected =
        i == 0 ? absl::StatusCode::kInternal : absl::StatusCode::kUnavailable;
    EXPECT_EQ(answers[i]->result().status().code(), expected) << answers[i]->result().status();
  }
  EXPECT_THAT(std::string(answers[1]->result().status().message()), HasSubstr("device lost"));
  EXPECT_TRUE(engine_->WaitIdle(kAsyncTimeout));
  absl::StatusOr<std::vector<Engine::VersionStats>> stats = engine_->GetStats("simple", -1);
  ASSERT_TRUE(stats.ok()) << stats.status();
  const ModelStatsSnapshot& snapshot = (*stats)[0].stats;
  EXPECT_EQ(snapshot.failures_by_reason[static_cast<size_t>(FailureReason::kInternal)], 1u);
  EXPECT_EQ(snapshot.failures_by_reason[static_cast<size_t>(FailureReason::kUnavailable)], 3u);
  EXPECT_EQ(snapshot.queue_depth, 0u);
}

// instance_group count N: N instances, each with its own executor, run batches at the same time.
// Every batch is held until all N instances are inside one at once, which only N concurrently
// running executors can reach.
TEST_F(EngineTest, InstanceGroupRunsBatchesConcurrentlyOnEveryInstance) {
  constexpr int kInstances = 3;
  struct Meeting {
    std::mutex mu;
    std::condition_variable cv;
    int inside = 0;
    int max_inside = 0;
    std::vector<int> instances;
  };
  auto meeting = std::make_shared<Meeting>();
  EngineOptions options;
  options.executor_slots = 1;  // one batch per executor: concurrency must come from instances
  options.before_batch_for_test = [meeting](absl::string_view, int64_t,
                                            int instance) -> absl::Status {
    std::unique_lock<std::mutex> lock(meeting->mu);
    meeting->instances.push_back(instance);
    meeting->max_inside = std::max(meeting->max_inside, ++meeting->inside);
    meeting->cv.notify_all();
    meeting->cv.wait_for(lock, kAsyncTimeout, [&] { return meeting->max_inside >= kInstances; });
    --meeting->inside;
    return absl::OkStatus();
  };
  engine_ = CreateEngine(options);
  ModelConfig config = SimpleConfig("simple");
  config.instance_count = kInstances;
  Load(Spec(config));

  std::vector<std::shared_ptr<Answer>> answers;
  for (int i = 0; i < kInstances; ++i) {
    answers.push_back(std::make_shared<Answer>());
    engine_->Submit(MakeRequest("simple", -1, SimpleInputs(1), Answer::Into(answers.back())));
  }
  for (auto& answer : answers) {
    ASSERT_TRUE(answer->Wait(kAsyncTimeout));
    EXPECT_TRUE(answer->result().ok()) << answer->result().status();
  }
  std::lock_guard<std::mutex> lock(meeting->mu);
  EXPECT_EQ(meeting->max_inside, kInstances);
  std::vector<int> instances = meeting->instances;
  std::sort(instances.begin(), instances.end());
  EXPECT_THAT(instances, ElementsAre(0, 1, 2));
}

TEST(FaultInjectionTest, ParsesTheSpecAndFiresOnce) {
  EXPECT_FALSE(ParseFaultInjectionSpecForTest("").ok());
  EXPECT_FALSE(ParseFaultInjectionSpecForTest("simple").ok());
  EXPECT_FALSE(ParseFaultInjectionSpecForTest(":3").ok());
  EXPECT_FALSE(ParseFaultInjectionSpecForTest("simple:-1").ok());
  EXPECT_FALSE(ParseFaultInjectionSpecForTest("simple:x").ok());
  absl::StatusOr<FaultInjectionSpec> spec = ParseFaultInjectionSpecForTest("simple:2");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model, "simple");
  EXPECT_EQ(spec->after_batches, 2);

  auto hook = MakeFaultInjectionHookForTest(*spec);
  EXPECT_TRUE(hook("identity", 1, 0).ok());  // other models never count
  EXPECT_TRUE(hook("simple", 1, 0).ok());
  EXPECT_TRUE(hook("simple", 1, 1).ok());
  const absl::Status fired = hook("simple", 1, 1);
  EXPECT_EQ(fired.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(
      std::string(fired.message()),
      HasSubstr("SLUICE_TEST_FAULT_INJECT=simple:2 fired in batch 3 (version 1, instance 1)"));
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(hook("simple", 2, 0).ok());  // once per process
}

TEST(FaultInjectionTest, ACudaErrorNameClassifiesTheFault) {
  absl::StatusOr<FaultInjectionSpec> sticky =
      ParseFaultInjectionSpecForTest("simple:0:cudaErrorIllegalAddress");
  ASSERT_TRUE(sticky.ok()) << sticky.status();
  EXPECT_EQ(sticky->model, "simple");
  EXPECT_EQ(sticky->after_batches, 0);
  ASSERT_TRUE(sticky->cuda_error.has_value());
  EXPECT_EQ(sticky->cuda_error->code, 700);
  const absl::Status fatal = MakeFaultInjectionHookForTest(*sticky)("simple", 1, 0);
  EXPECT_EQ(fatal.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(IsProcessFatal(fatal));
  EXPECT_THAT(std::string(fatal.message()), HasSubstr("cudaErrorIllegalAddress (700, sticky"));

  absl::StatusOr<FaultInjectionSpec> recoverable =
      ParseFaultInjectionSpecForTest("a:b:3:cudaErrorLaunchOutOfResources");
  ASSERT_TRUE(recoverable.ok()) << recoverable.status();
  EXPECT_EQ(recoverable->model, "a:b");
  const absl::Status instance_fault = MakeFaultInjectionHookForTest(*recoverable)("a:b", 1, 0);
  EXPECT_TRUE(instance_fault.ok());  // after 3 batches, not the first
  EXPECT_FALSE(ParseFaultInjectionSpecForTest("simple:1:cudaErrorNoSuchThing").ok());
  EXPECT_FALSE(ParseFaultInjectionSpecForTest("simple:cudaErrorIllegalAddress").ok());
}

TEST(DeviceFaultTest, StickyCodesArePayloadsThatSurviveRewording) {
  EXPECT_TRUE(IsStickyCudaError(700));
  EXPECT_TRUE(IsStickyCudaError(719));
  EXPECT_TRUE(IsStickyCudaError(214));
  EXPECT_FALSE(IsStickyCudaError(701));
  EXPECT_FALSE(IsStickyCudaError(2));
  EXPECT_FALSE(IsStickyCudaError(123456));
  const absl::Status fatal = MarkProcessFatal(absl::DataLossError("gone"));
  EXPECT_TRUE(IsProcessFatal(fatal));
  EXPECT_FALSE(IsProcessFatal(absl::InternalError("gone")));
  const absl::Status internal = WithInternalCode(fatal);
  EXPECT_EQ(internal.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(internal.message(), "gone");
  EXPECT_TRUE(IsProcessFatal(internal));
}

// A process-fatal fault (a sticky CUDA error) is the process's, not the instance's: the engine
// stops taking requests for every model, fails their queues and calls on_process_fatal once.
TEST_F(EngineTest, ProcessFatalFaultStopsEveryModelAndCallsTheOwnerOnce) {
  auto fault_next = std::make_shared<std::atomic<bool>>(false);
  auto fatal_calls = std::make_shared<std::atomic<int>>(0);
  EngineOptions options;
  options.before_batch_for_test = [fault_next](absl::string_view model, int64_t,
                                               int) -> absl::Status {
    if (model == "simple" && fault_next->exchange(false)) {
      return MarkProcessFatal(absl::InternalError("cudaErrorIllegalAddress"));
    }
    return absl::OkStatus();
  };
  options.on_process_fatal = [fatal_calls](const absl::Status& fault) {
    EXPECT_TRUE(IsProcessFatal(fault));
    fatal_calls->fetch_add(1);
  };
  engine_ = CreateEngine(options);
  Load(Spec(SimpleConfig("simple")));
  Load(Spec(IdentityConfig("identity", DataType::kFp32, {2}, 8)));
  ASSERT_TRUE(Infer(*engine_, "identity", -1,
                    {{"INPUT0", DataType::kFp32, {1, 2}, ToBytes(std::vector<float>{1, 2})}})
                  .ok());

  fault_next->store(true);
  absl::StatusOr<InferenceResponse> failed = Infer(*engine_, "simple", -1, SimpleInputs(1));
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  ASSERT_TRUE(Eventually([&] { return fatal_calls->load() == 1; }));
  EXPECT_TRUE(engine_->draining());
  EXPECT_FALSE(engine_->IsModelReady("identity", -1));
  absl::StatusOr<InferenceResponse> refused =
      Infer(*engine_, "identity", -1,
            {{"INPUT0", DataType::kFp32, {1, 2}, ToBytes(std::vector<float>{1, 2})}});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("device failed"));
  const std::vector<ModelVersionStatus> list = engine_->ListModels();
  const ModelVersionStatus* status = FindStatus(list, "simple", 1);
  ASSERT_NE(status, nullptr);
  EXPECT_THAT(status->reason, HasSubstr("process-fatal device fault"));
  EXPECT_TRUE(engine_->WaitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(fatal_calls->load(), 1);
}

}  // namespace
}  // namespace sluice::engine
