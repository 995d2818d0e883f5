// CpuExecutor: gathers a batch's requests in queue order, runs the model once and scatters each
// request's slice (requested outputs per request), bounds batches in flight by its slots, finishes
// every batch it took on Stop, and runs on the calling thread with run_on_caller. Faults and
// device inputs have files of their own (cpu_executor_*_test.cc); the fake instance and the
// fixture are in tests/support/engine/cpu_executor_test_util.h.

#include "engine/cpu/cpu_executor.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/model_stats.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/engine/answer.h"
#include "tests/support/engine/cpu_executor_test_util.h"

namespace sluice::engine::cpu {
namespace {

using ::sluice::engine::testing::Answer;
using ::sluice::engine::testing::CpuExecutorTest;
using ::sluice::engine::testing::FakeInstance;
using ::sluice::engine::testing::Floats;
using ::sluice::engine::testing::kAsyncTimeout;
using ::testing::HasSubstr;

TEST_F(CpuExecutorTest, CreateRejectsBadOptions) {
  ExecutorOptions no_stats;
  EXPECT_FALSE(
      CpuExecutor::Create(config_, std::make_unique<FakeInstance>(config_, shared_), no_stats)
          .ok());
  ExecutorOptions no_slots;
  no_slots.stats = &stats_;
  no_slots.slot_count = 0;
  EXPECT_FALSE(
      CpuExecutor::Create(config_, std::make_unique<FakeInstance>(config_, shared_), no_slots)
          .ok());
  ExecutorOptions ok;
  ok.stats = &stats_;
  EXPECT_FALSE(CpuExecutor::Create(config_, nullptr, ok).ok());
}

TEST_F(CpuExecutorTest, GathersInQueueOrderAndScattersEachRequestsSlice) {
  Create(2);
  std::vector<std::unique_ptr<InferenceRequest>> requests;
  requests.push_back(Request(1, 100));
  requests.push_back(Request(3, 200));
  requests.push_back(Request(2, 300));
  executor_->Execute(MakeBatch(std::move(requests)));
  for (size_t r = 0; r < 3; ++r) ASSERT_TRUE(answers_[r]->Wait(kAsyncTimeout)) << r;

  // The model saw one batch of 6 items, requests concatenated in order.
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    EXPECT_EQ(shared_->runs, 1);
    ASSERT_EQ(shared_->last_shapes.size(), 2u);
    EXPECT_EQ(shared_->last_shapes[0], Shape({6, 2}));
    EXPECT_EQ(shared_->last_inputs[0],
              std::vector<float>({100, 101, 200, 201, 202, 203, 204, 205, 300, 301, 302, 303}));
  }
  const int batches[] = {1, 3, 2};
  const float bases[] = {100, 200, 300};
  for (size_t r = 0; r < 3; ++r) {
    SCOPED_TRACE(r);
    ASSERT_TRUE(answers_[r]->result().ok()) << answers_[r]->result().status();
    const absl::StatusOr<InferenceResponse> result = answers_[r]->result();
    const InferenceResponse& response = *result;
    EXPECT_EQ(response.id, "r" + std::to_string(r));
    EXPECT_EQ(response.model_name, "fake");
    ASSERT_EQ(response.outputs.size(), 2u);
    EXPECT_EQ(response.outputs[0].name, "A2");
    EXPECT_EQ(response.outputs[1].name, "B2");
    EXPECT_EQ(response.outputs[0].shape, Shape({batches[r], 2}));
    std::vector<float> a2, b2;
    for (int j = 0; j < batches[r] * 2; ++j) {
      a2.push_back(2 * (bases[r] + j));
      b2.push_back(-2 * (bases[r] + j));
    }
    EXPECT_EQ(Floats(response.outputs[0].data), a2);
    EXPECT_EQ(Floats(response.outputs[1].data), b2);
  }
  const ModelStatsSnapshot stats = stats_.Snapshot();
  EXPECT_EQ(stats.inference_count, 6u);
  EXPECT_EQ(stats.execution_count, 1u);
  EXPECT_EQ(stats.success.count, 3u);
  EXPECT_EQ(stats.batch_stats.count(6), 1u);
}

TEST_F(CpuExecutorTest, RequestedOutputsPerRequestInABatch) {
  Create(1);
  std::vector<std::unique_ptr<InferenceRequest>> requests;
  requests.push_back(Request(1, 10, {"B2"}));
  requests.push_back(Request(1, 20, {"B2", "A2"}));
  requests.push_back(Request(1, 30));
  executor_->Execute(MakeBatch(std::move(requests)));
  for (size_t r = 0; r < 3; ++r) ASSERT_TRUE(answers_[r]->Wait(kAsyncTimeout)) << r;
  {
    ASSERT_TRUE(answers_[0]->result().ok());
    ASSERT_EQ(answers_[0]->result()->outputs.size(), 1u);
    EXPECT_EQ(answers_[0]->result()->outputs[0].name, "B2");
    EXPECT_EQ(Floats(answers_[0]->result()->outputs[0].data), std::vector<float>({-20, -22}));
  }
  {
    ASSERT_TRUE(answers_[1]->result().ok());
    ASSERT_EQ(answers_[1]->result()->outputs.size(), 2u);
    EXPECT_EQ(answers_[1]->result()->outputs[0].name, "B2");
    EXPECT_EQ(answers_[1]->result()->outputs[1].name, "A2");
    EXPECT_EQ(Floats(answers_[1]->result()->outputs[1].data), std::vector<float>({40, 42}));
  }
  {
    ASSERT_TRUE(answers_[2]->result().ok());
    ASSERT_EQ(answers_[2]->result()->outputs.size(), 2u);
    EXPECT_EQ(answers_[2]->result()->outputs[0].name, "A2");
  }
}

TEST_F(CpuExecutorTest, SingleRequestSelectsOutputs) {
  Create(1);
  executor_->Execute(MakeBatch([&] {
    std::vector<std::unique_ptr<InferenceRequest>> requests;
    requests.push_back(Request(2, 1, {"B2", "A2"}));
    return requests;
  }()));
  ASSERT_TRUE(answers_[0]->Wait(kAsyncTimeout));
  ASSERT_TRUE(answers_[0]->result().ok()) << answers_[0]->result().status();
  ASSERT_EQ(answers_[0]->result()->outputs.size(), 2u);
  EXPECT_EQ(answers_[0]->result()->outputs[0].name, "B2");
  EXPECT_EQ(Floats(answers_[0]->result()->outputs[0].data), std::vector<float>({-2, -4, -6, -8}));
  EXPECT_EQ(answers_[0]->result()->outputs[1].name, "A2");
}

TEST_F(CpuExecutorTest, BackendErrorFailsEveryRequestOfTheBatch) {
  shared_->run = [](std::span<const TensorView>) -> absl::StatusOr<std::vector<Tensor>> {
    return absl::InternalError("kernel exploded");
  };
  Create(1);
  std::vector<std::unique_ptr<InferenceRequest>> requests;
  requests.push_back(Request(1, 0));
  requests.push_back(Request(2, 0));
  executor_->Execute(MakeBatch(std::move(requests)));
  for (size_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(answers_[r]->Wait(kAsyncTimeout));
    EXPECT_EQ(answers_[r]->result().status().code(), absl::StatusCode::kInternal);
    EXPECT_THAT(std::string(answers_[r]->result().status().message()), HasSubstr("exploded"));
  }
  EXPECT_EQ(stats_.Snapshot().fail.count, 2u);
  EXPECT_EQ(stats_.Snapshot().success.count, 0u);
}

// A backend bug (outputs that do not match the config) fails the batch with INTERNAL; no client
// gets bytes it did not ask for.
TEST_F(CpuExecutorTest, MalformedBackendOutputsFailWithInternal) {
  struct Case {
    const char* name;
    std::function<void(std::vector<Tensor>&)> damage;
  };
  const std::vector<Case> cases = {
      {"MissingOutput", [](std::vector<Tensor>& out) { out.pop_back(); }},
      {"WrongBatchDimension", [](std::vector<Tensor>& out) { out[0].shape[0] += 1; }},
      {"ShortData", [](std::vector<Tensor>& out) { out[1].data.resize(out[1].data.size() - 4); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    shared_->run =
        [&c, this](std::span<const TensorView> inputs) -> absl::StatusOr<std::vector<Tensor>> {
      std::vector<Tensor> outputs(inputs.size());
      for (size_t i = 0; i < inputs.size(); ++i) {
        outputs[i].name = config_.outputs[i].name;
        outputs[i].dtype = DataType::kFp32;
        outputs[i].shape = inputs[i].shape;
        outputs[i].data.assign(inputs[i].data.begin(), inputs[i].data.end());
      }
      c.damage(outputs);
      return outputs;
    };
    Create(1);
    const size_t first = answers_.size();
    std::vector<std::unique_ptr<InferenceRequest>> requests;
    requests.push_back(Request(1, 0));
    requests.push_back(Request(1, 0));
    executor_->Execute(MakeBatch(std::move(requests)));
    for (size_t r = first; r < answers_.size(); ++r) {
      ASSERT_TRUE(answers_[r]->Wait(kAsyncTimeout));
      EXPECT_EQ(answers_[r]->result().status().code(), absl::StatusCode::kInternal)
          << answers_[r]->result().status();
    }
    executor_->Stop();
    executor_.reset();
    shared_->run = nullptr;
  }
}

TEST_F(CpuExecutorTest, SlotsBoundBatchesInFlight) {
  shared_->Close();  // Run() blocks until the test opens the gate
  Create(2);
  EXPECT_TRUE(executor_->HasFreeSlot());
  EXPECT_EQ(executor_->InFlight(), 0);
  for (int i = 0; i < 2; ++i) {
    std::vector<std::unique_ptr<InferenceRequest>> requests;
    requests.push_back(Request(1, float(i)));
    executor_->Execute(MakeBatch(std::move(requests)));
  }
  EXPECT_FALSE(executor_->HasFreeSlot());
  EXPECT_EQ(executor_->InFlight(), 2);
  ASSERT_TRUE(shared_->WaitForRuns(1));
  EXPECT_EQ(Count(0), 0);

  shared_->Open();
  ASSERT_TRUE(WaitForSlotsFreed(2));
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(answers_[r]->Wait(kAsyncTimeout));
  EXPECT_TRUE(executor_->HasFreeSlot());
  EXPECT_EQ(executor_->InFlight(), 0);
}

TEST_F(CpuExecutorTest, StopFinishesEveryBatchTaken) {
  shared_->Close();
  Create(3);
  for (int i = 0; i < 3; ++i) {
    std::vector<std::unique_ptr<InferenceRequest>> requests;
    requests.push_back(Request(1, float(i)));
    requests.push_back(Request(2, float(i)));
    executor_->Execute(MakeBatch(std::move(requests)));
  }
  ASSERT_TRUE(shared_->WaitForRuns(1));
  shared_->Open();
  executor_->Stop();
  // Stop() returns after every request was answered.
  for (size_t r = 0; r < answers_.size(); ++r) {
    EXPECT_EQ(answers_[r]->count(), 1) << r;
    EXPECT_TRUE(answers_[r]->result().ok()) << r;
  }
  EXPECT_EQ(executor_->InFlight(), 0);
  EXPECT_FALSE(executor_->HasFreeSlot());  // stopped: takes nothing more
  executor_->Stop();                       // idempotent
}

TEST_F(CpuExecutorTest, KeepaliveReleasedOnceAnswered) {
  Create(1);
  std::vector<std::unique_ptr<InferenceRequest>> requests;
  requests.push_back(Request(1, 5));
  std::weak_ptr<const void> keepalive = requests[0]->keepalive;
  executor_->Execute(MakeBatch(std::move(requests)));
  ASSERT_TRUE(answers_[0]->Wait(kAsyncTimeout));
  ASSERT_TRUE(WaitForSlotsFreed(1));
  EXPECT_TRUE(keepalive.expired());
}

// run_on_caller (a model with one instance): Execute() gathers, runs, scatters and answers the
// batch on the calling thread (the scheduler's batcher) and returns with every request answered;
// a backend fault is answered and reported there too.
TEST_F(CpuExecutorTest, RunOnCallerRunsAndAnswersTheBatchOnTheCallingThread) {
  std::thread::id ran_on;
  int run = 0;
  shared_->run = [&](std::span<const TensorView> inputs) -> absl::StatusOr<std::vector<Tensor>> {
    ran_on = std::this_thread::get_id();
    if (++run == 2) return absl::InternalError("backend broke");
    std::vector<Tensor> outputs(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      outputs[i].name = config_.outputs[i].name;
      outputs[i].dtype = DataType::kFp32;
      outputs[i].shape = inputs[i].shape;
      outputs[i].data.assign(inputs[i].data.begin(), inputs[i].data.end());
    }
    return outputs;
  };
  run_on_caller_ = true;
  Create(2);
  EXPECT_TRUE(executor_->ExecuteRunsBatch());
  EXPECT_FALSE(executor_->ExecuteOnlyEnqueues());  // never on an RPC thread
  std::vector<std::unique_ptr<InferenceRequest>> requests;
  requests.push_back(Request(1, 100));
  requests.push_back(Request(2, 200));
  executor_->Execute(MakeBatch(std::move(requests)));
  // No waiting: answered before Execute() returned, on this thread.
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(Count(0), 1);
  EXPECT_EQ(Count(1), 1);
  EXPECT_EQ(executor_->InFlight(), 0);
  EXPECT_TRUE(executor_->HasFreeSlot());
  ASSERT_TRUE(answers_[1]->result().ok()) << answers_[1]->result().status();
  EXPECT_EQ(Floats(answers_[1]->result()->outputs[0].data),
            std::vector<float>({200, 201, 202, 203}));
  EXPECT_EQ(executor_->ReadItemCounter(), 3u);

  std::vector<std::unique_ptr<InferenceRequest>> second;
  second.push_back(Request(1, 0));
  executor_->Execute(MakeBatch(std::move(second)));
  EXPECT_EQ(answers_[2]->result().status().code(), absl::StatusCode::kInternal);
  ASSERT_EQ(Faults().size(), 1u);  // reported before Execute() returned
  EXPECT_THAT(std::string(Faults()[0].message()), HasSubstr("backend broke"));
  EXPECT_FALSE(executor_->HasFreeSlot());
}

}  // namespace
}  // namespace sluice::engine::cpu
