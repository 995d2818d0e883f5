// CpuExecutor with inputs in device memory (engine::DeviceBytes, a CUDA shared-memory region on
// a GPU build whose model runs on the CPU backend), through a fake mapping: copied on the
// executor's thread, the mapping held until the batch was answered, copy errors.

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/device_fault.h"
#include "engine/cpu/cpu_executor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/engine/answer.h"
#include "tests/support/engine/cpu_executor_test_util.h"
#include "tests/support/engine/fake_device_memory.h"

namespace sluice::engine::cpu {
namespace {

using ::sluice::engine::testing::Answer;
using ::sluice::engine::testing::CpuExecutorTest;
using ::sluice::engine::testing::FakeInstance;
using ::sluice::engine::testing::Floats;
using ::sluice::engine::testing::kAsyncTimeout;
using ::testing::HasSubstr;

using ::sluice::engine::testing::FakeDeviceMemory;

// Moves input `index` of `request` into `memory` at `offset`: its bytes are copied there and the
// input then references them instead of host memory.
void PutOnDevice(InferenceRequest& request, size_t index,
                 const std::shared_ptr<FakeDeviceMemory>& memory, uint64_t offset) {
  TensorView& input = request.inputs[index];
  ASSERT_TRUE(memory->CopyFromHost(offset, input.data).ok());
  input.device = FakeDeviceMemory::Bytes(memory, offset, input.data.size());
  input.data = {};
}

// What the fake mapping saw by the time its last keepalive went.
struct Release {
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  int answers_before = -1;  // requests answered when it was released
  std::vector<std::thread::id> copy_threads;

  bool Wait() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, kAsyncTimeout, [&] { return released; });
  }
};

// The executor copies device inputs on its own thread (never the submitting one), runs the batch
// on the copies, and the mapping stays open until the batch was answered: released only after
// every request of the batch got its answer.
TEST_F(CpuExecutorTest, CopiesDeviceInputsOnItsThreadAndHoldsTheMappingUntilAnswered) {
  Create(2);
  auto release = std::make_shared<Release>();
  auto memory = std::make_shared<FakeDeviceMemory>(
      std::vector<std::byte>(256), [this, release](const FakeDeviceMemory& mapping) {
        std::lock_guard<std::mutex> lock(release->mu);
        release->released = true;
        release->answers_before = Count(0) + Count(1);
        release->copy_threads = mapping.copy_threads();
        release->cv.notify_all();
      });
  std::vector<std::unique_ptr<InferenceRequest>> requests;
  requests.push_back(Request(1, 100));  // A in device memory, B on the host
  requests.push_back(Request(2, 200));  // A on the host, B in device memory
  PutOnDevice(*requests[0], 0, memory, 0);
  PutOnDevice(*requests[1], 1, memory, 64);
  memory.reset();  // from here the requests alone hold the mapping

  shared_->Close();  // the model holds the batch in Run: it is in flight
  executor_->Execute(MakeBatch(std::move(requests)));
  ASSERT_TRUE(shared_->WaitForRuns(1));
  {
    std::lock_guard<std::mutex> lock(release->mu);
    EXPECT_FALSE(release->released) << "the mapping was released under an in-flight batch";
  }
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    EXPECT_EQ(shared_->last_shapes[0], Shape({3, 2}));
    EXPECT_EQ(shared_->last_inputs[0], std::vector<float>({100, 101, 200, 201, 202, 203}));
    EXPECT_EQ(shared_->last_inputs[1], std::vector<float>({-100, -101, -200, -201, -202, -203}));
  }
  shared_->Open();
  for (size_t r = 0; r < 2; ++r) ASSERT_TRUE(answers_[r]->Wait(kAsyncTimeout)) << r;
  ASSERT_TRUE(release->Wait()) << "the mapping was never released (a leaked keepalive)";
  {
    std::lock_guard<std::mutex> lock(release->mu);
    EXPECT_EQ(release->answers_before, 2);
    ASSERT_EQ(release->copy_threads.size(), 2u);  // one copy per device input
    for (const std::thread::id& id : release->copy_threads) {
      EXPECT_NE(id, std::this_thread::get_id()) << "copied on the submitting thread";
    }
  }
  const absl::StatusOr<InferenceResponse> first = answers_[0]->result();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(Floats(first->outputs[0].data), std::vector<float>({200, 202}));
  EXPECT_EQ(Floats(first->outputs[1].data), std::vector<float>({-200, -202}));
  const absl::StatusOr<InferenceResponse> second = answers_[1]->result();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(Floats(second->outputs[0].data), std::vector<float>({400, 402, 404, 406}));
  EXPECT_EQ(Floats(second->outputs[1].data), std::vector<float>({-400, -402, -404, -406}));
}

// A batch of one request is gathered without a copy when its inputs are in host memory; in device
// memory they are copied all the same (the model reads host memory).
TEST_F(CpuExecutorTest, ALoneRequestWithDeviceInputsIsCopiedToo) {
  Create(1);
  auto memory = std::make_shared<FakeDeviceMemory>(std::vector<std::byte>(64));
  std::vector<std::unique_ptr<InferenceRequest>> requests;
  requests.push_back(Request(2, 7));
  PutOnDevice(*requests[0], 0, memory, 0);
  PutOnDevice(*requests[0], 1, memory, 32);
  executor_->Execute(MakeBatch(std::move(requests)));
  const absl::StatusOr<InferenceResponse> result = answers_[0]->WaitForResult(kAsyncTimeout);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(Floats(result->outputs[0].data), std::vector<float>({14, 16, 18, 20}));
  EXPECT_EQ(Floats(result->outputs[1].data), std::vector<float>({-14, -16, -18, -20}));
  EXPECT_EQ(memory->copy_threads().size(), 2u);
}

// A failed copy fails its batch; it faults the executor only when the CUDA context is lost (a
// process-fatal error), as any other CUDA error would.
TEST_F(CpuExecutorTest, ADeviceCopyErrorFailsItsBatchAndFaultsOnlyWhenFatal) {
  Create(1);
  auto memory = std::make_shared<FakeDeviceMemory>(std::vector<std::byte>(64));
  memory->FailCopiesWith(absl::InternalError("cudaMemcpyAsync failed: invalid argument"));
  std::vector<std::unique_ptr<InferenceRequest>> first;
  first.push_back(Request(1, 1));
  PutOnDevice(*first[0], 0, memory, 0);
  executor_->Execute(MakeBatch(std::move(first)));
  ASSERT_TRUE(WaitForSlotsFreed(1));
  {
    const absl::Status status = answers_[0]->result().status();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("model 'fake': input 'A': copying it from device memory"));
    EXPECT_THAT(std::string(status.message()), HasSubstr("invalid argument"));
  }
  EXPECT_TRUE(Faults().empty());
  ASSERT_TRUE(executor_->HasFreeSlot());
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    EXPECT_EQ(shared_->runs, 0);
  }

  memory->FailCopiesWith(
      MarkProcessFatal(absl::InternalError("cudaMemcpyAsync failed: illegal address")));
  std::vector<std::unique_ptr<InferenceRequest>> second;
  second.push_back(Request(1, 2));
  PutOnDevice(*second[0], 1, memory, 8);
  executor_->Execute(MakeBatch(std::move(second)));
  ASSERT_TRUE(WaitForSlotsFreed(2));
  EXPECT_EQ(answers_[1]->result().status().code(), absl::StatusCode::kInternal);
  const std::vector<absl::Status> faults = Faults();
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_TRUE(IsProcessFatal(faults[0]));
  EXPECT_THAT(std::string(faults[0].message()), HasSubstr("illegal address"));
  EXPECT_FALSE(executor_->HasFreeSlot());
}

}  // namespace
}  // namespace sluice::engine::cpu
