// CpuExecutor faults (ExecutorOptions::on_fault): an INTERNAL error from Run() or malformed
// outputs fault the executor (reported once, after the answers; nothing more is taken), batches
// behind a fault fail without running, other errors fail only their batch, the test hook injects
// a fault.

#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/device_fault.h"
#include "engine/core/model_stats.h"
#include "engine/cpu/cpu_executor.h"
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

// --- Faults (ExecutorOptions::on_fault)
// -----------------------------------------------------------

// INTERNAL from Run() is a fault of the backend: the batch fails INTERNAL (naming what failed),
// on_fault is called once, after the answers, and the executor takes nothing more.
TEST_F(CpuExecutorTest, InternalBackendErrorFaultsTheExecutor) {
  shared_->run = [](std::span<const TensorView>) -> absl::StatusOr<std::vector<Tensor>> {
    return absl::InternalError("cublasLtMatmul failed: CUBLAS_STATUS_EXECUTION_FAILED");
  };
  Create(2);
  std::vector<std::unique_ptr<InferenceRequest>> requests;
  requests.push_back(Request(1, 0));
  requests.push_back(Request(2, 0));
  executor_->Execute(MakeBatch(std::move(requests)));
  ASSERT_TRUE(WaitForSlotsFreed(1));  // on_fault runs before the slot is freed
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(answers_[r]->result().status().code(), absl::StatusCode::kInternal);
    EXPECT_THAT(std::string(answers_[r]->result().status().message()),
                HasSubstr("model 'fake': backend fault in Run(): cublasLtMatmul failed"));
  }
  const std::vector<absl::Status> faults = Faults();
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(faults[0].message()), HasSubstr("cublasLtMatmul failed"));
  EXPECT_FALSE(executor_->HasFreeSlot());
  EXPECT_EQ(executor_->InFlight(), 0);
  const ModelStatsSnapshot snapshot = stats_.Snapshot();
  EXPECT_EQ(snapshot.failures_by_reason[static_cast<size_t>(FailureReason::kInternal)], 2u);
  EXPECT_EQ(snapshot.success.count, 0u);
}

// Batches the executor took before it faulted fail INTERNAL without running on the broken
// instance; on_fault is still called once.
TEST_F(CpuExecutorTest, BatchesTakenBehindAFaultFailWithoutRunning) {
  shared_->run = [](std::span<const TensorView>) -> absl::StatusOr<std::vector<Tensor>> {
    return absl::InternalError("kernel exploded");
  };
  shared_->Close();
  Create(3);
  for (int i = 0; i < 3; ++i) {
    std::vector<std::unique_ptr<InferenceRequest>> requests;
    requests.push_back(Request(1, float(i)));
    executor_->Execute(MakeBatch(std::move(requests)));
  }
  ASSERT_TRUE(shared_->WaitForRuns(1));
  shared_->Open();
  ASSERT_TRUE(WaitForSlotsFreed(3));
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    EXPECT_EQ(shared_->runs, 1);
  }
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(answers_[r]->result().status().code(), absl::StatusCode::kInternal) << r;
    EXPECT_THAT(std::string(answers_[r]->result().status().message()), HasSubstr("exploded")) << r;
  }
  for (size_t r = 1; r < 3; ++r) {
    EXPECT_THAT(std::string(answers_[r]->result().status().message()),
                HasSubstr("batch not run, its instance faulted earlier"));
  }
  EXPECT_EQ(Faults().size(), 1u);
  EXPECT_FALSE(executor_->HasFreeSlot());
}

// Other codes are the batch's problem, not the instance's: no fault, the next batch runs.
TEST_F(CpuExecutorTest, NonInternalBackendErrorFailsOnlyItsBatch) {
  shared_->run = [](std::span<const TensorView>) -> absl::StatusOr<std::vector<Tensor>> {
    return absl::InvalidArgumentError("value out of range");
  };
  Create(1);
  std::vector<std::unique_ptr<InferenceRequest>> first;
  first.push_back(Request(1, 0));
  executor_->Execute(MakeBatch(std::move(first)));
  ASSERT_TRUE(WaitForSlotsFreed(1));
  EXPECT_TRUE(executor_->HasFreeSlot());
  shared_->run = nullptr;
  std::vector<std::unique_ptr<InferenceRequest>> second;
  second.push_back(Request(1, 3));
  executor_->Execute(MakeBatch(std::move(second)));
  ASSERT_TRUE(WaitForSlotsFreed(2));
  { EXPECT_EQ(answers_[0]->result().status().code(), absl::StatusCode::kInvalidArgument); }
  {
    ASSERT_TRUE(answers_[1]->result().ok()) << answers_[1]->result().status();
    EXPECT_EQ(Floats(answers_[1]->result()->outputs[0].data), std::vector<float>({6, 8}));
  }
  EXPECT_TRUE(Faults().empty());
}

// Outputs that break the config are a backend fault too.
TEST_F(CpuExecutorTest, MalformedOutputsFaultTheExecutor) {
  shared_->run = [](std::span<const TensorView>) -> absl::StatusOr<std::vector<Tensor>> {
    return std::vector<Tensor>{};  // no outputs at all
  };
  Create(2);
  std::vector<std::unique_ptr<InferenceRequest>> requests;
  requests.push_back(Request(1, 0));
  executor_->Execute(MakeBatch(std::move(requests)));
  ASSERT_TRUE(WaitForSlotsFreed(1));
  { EXPECT_EQ(answers_[0]->result().status().code(), absl::StatusCode::kInternal); }
  const std::vector<absl::Status> faults = Faults();
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_THAT(std::string(faults[0].message()), HasSubstr("returned 0 outputs"));
  EXPECT_FALSE(executor_->HasFreeSlot());
}

// The test-only hook (EngineOptions::before_batch_for_test) faults the executor exactly as a
// backend fault does, without running the batch.
TEST_F(CpuExecutorTest, BeforeBatchHookInjectsAFault) {
  std::atomic<int> calls{0};
  Create(1, [&calls]() -> absl::Status {
    if (calls.fetch_add(1) == 1) return absl::InternalError("injected by the test");
    return absl::OkStatus();
  });
  std::vector<std::unique_ptr<InferenceRequest>> first;
  first.push_back(Request(1, 1));
  executor_->Execute(MakeBatch(std::move(first)));
  ASSERT_TRUE(WaitForSlotsFreed(1));
  ASSERT_TRUE(executor_->HasFreeSlot());
  std::vector<std::unique_ptr<InferenceRequest>> second;
  second.push_back(Request(1, 2));
  executor_->Execute(MakeBatch(std::move(second)));
  ASSERT_TRUE(WaitForSlotsFreed(2));
  { EXPECT_TRUE(answers_[0]->result().ok()) << answers_[0]->result().status(); }
  {
    EXPECT_EQ(answers_[1]->result().status().code(), absl::StatusCode::kInternal);
    EXPECT_THAT(std::string(answers_[1]->result().status().message()),
                HasSubstr("model 'fake': injected test fault: injected by the test"));
  }
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    EXPECT_EQ(shared_->runs, 1);  // the faulted batch never reached the model
  }
  EXPECT_EQ(Faults().size(), 1u);
  EXPECT_FALSE(executor_->HasFreeSlot());
  EXPECT_EQ(executor_->ReadItemCounter(), 1u);
}

}  // namespace
}  // namespace sluice::engine::cpu
