#include "engine/cpu/cpu_executor.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/device_fault.h"
#include "engine/model_stats.h"
#include "engine/testing/answer.h"
#include "engine/testing/fake_device_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::engine::cpu {
namespace {

using ::testing::HasSubstr;

constexpr auto kAsyncTimeout = std::chrono::seconds(10);

// A ModelInstance whose Run() the test scripts: by default out = 2 * in (FP32) for each input;
// `gate` holds Run() until the test opens it; `override_outputs` replaces the result.
class FakeInstance final : public ModelInstance {
 public:
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool open = true;
    int runs = 0;
    std::vector<Shape> last_shapes;
    std::vector<std::vector<float>> last_inputs;
    std::function<absl::StatusOr<std::vector<Tensor>>(std::span<const TensorView>)> run;

    void Close() {
      std::lock_guard<std::mutex> lock(mu);
      open = false;
    }
    void Open() {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
      cv.notify_all();
    }
    bool WaitForRuns(int n) {
      std::unique_lock<std::mutex> lock(mu);
      return cv.wait_for(lock, kAsyncTimeout, [&] { return runs >= n; });
    }
  };

  FakeInstance(const ModelConfig& config, std::shared_ptr<Shared> shared)
      : config_(config), shared_(std::move(shared)) {}

  absl::StatusOr<std::vector<Tensor>> Run(std::span<const TensorView> inputs) override {
    std::function<absl::StatusOr<std::vector<Tensor>>(std::span<const TensorView>)> run;
    {
      std::unique_lock<std::mutex> lock(shared_->mu);
      ++shared_->runs;
      shared_->last_shapes.clear();
      shared_->last_inputs.clear();
      for (const TensorView& input : inputs) {
        shared_->last_shapes.push_back(input.shape);
        std::vector<float> values(input.data.size() / sizeof(float));
        if (!values.empty()) std::memcpy(values.data(), input.data.data(), input.data.size());
        shared_->last_inputs.push_back(std::move(values));
      }
      shared_->cv.notify_all();
      shared_->cv.wait(lock, [&] { return shared_->open; });
      run = shared_->run;
    }
    if (run) return run(inputs);
    std::vector<Tensor> outputs(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      outputs[i].name = config_.outputs[i].name;
      outputs[i].dtype = DataType::kFp32;
      outputs[i].shape = inputs[i].shape;
      std::vector<float> values(inputs[i].data.size() / sizeof(float));
      std::memcpy(values.data(), inputs[i].data.data(), inputs[i].data.size());
      for (float& v : values) v *= 2;
      outputs[i].data.resize(inputs[i].data.size());
      std::memcpy(outputs[i].data.data(), values.data(), outputs[i].data.size());
    }
    return outputs;
  }

 private:
  const ModelConfig& config_;
  std::shared_ptr<Shared> shared_;
};

using ::sluice::engine::testing::Answer;

std::vector<std::byte> FloatBytes(const std::vector<float>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<float> Floats(const std::vector<std::byte>& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

class CpuExecutorTest : public ::testing::Test {
 protected:
  CpuExecutorTest() {
    config_.name = "fake";
    config_.backend = "fake";
    config_.max_batch_size = 8;
    config_.inputs = {{"A", DataType::kFp32, {2}}, {"B", DataType::kFp32, {2}}};
    config_.outputs = {{"A2", DataType::kFp32, {2}}, {"B2", DataType::kFp32, {2}}};
    shared_ = std::make_shared<FakeInstance::Shared>();
  }

  void Create(int slots, std::function<absl::Status()> before_batch = nullptr) {
    ExecutorOptions options;
    options.slot_count = slots;
    options.stats = &stats_;
    options.on_slot_freed = [this] {
      std::lock_guard<std::mutex> lock(freed_mu_);
      ++slots_freed_;
      freed_cv_.notify_all();
    };
    options.on_fault = [this](const absl::Status& fault) {
      std::lock_guard<std::mutex> lock(freed_mu_);
      faults_.push_back(fault);
      freed_cv_.notify_all();
    };
    options.before_batch_for_test = std::move(before_batch);
    absl::StatusOr<std::unique_ptr<CpuExecutor>> executor =
        CpuExecutor::Create(config_, std::make_unique<FakeInstance>(config_, shared_),
                            std::move(options), {.run_on_caller = run_on_caller_});
    ASSERT_TRUE(executor.ok()) << executor.status();
    executor_ = *std::move(executor);
  }

  // A request of `batch` items: A = base + j, B = -(base + j), each item 2 floats. Its buffers
  // are kept alive by the request itself.
  std::unique_ptr<InferenceRequest> Request(int batch, float base,
                                            std::vector<std::string> outputs = {}) {
    auto answer = std::make_shared<Answer>();
    answers_.push_back(answer);
    auto request = std::make_unique<InferenceRequest>("fake", 1, Answer::Into(answer));
    std::vector<float> a, b;
    for (int j = 0; j < batch * 2; ++j) {
      a.push_back(base + j);
      b.push_back(-(base + j));
    }
    auto owned = std::make_shared<std::vector<std::vector<std::byte>>>();
    owned->push_back(FloatBytes(a));
    owned->push_back(FloatBytes(b));
    request->inputs = {TensorView{"A", DataType::kFp32, {batch, 2}, (*owned)[0]},
                       TensorView{"B", DataType::kFp32, {batch, 2}, (*owned)[1]}};
    request->keepalive = owned;
    request->batch_size = batch;
    request->requested_outputs = std::move(outputs);
    request->id = "r" + std::to_string(answers_.size() - 1);
    return request;
  }

  Batch MakeBatch(std::vector<std::unique_ptr<InferenceRequest>> requests) {
    Batch batch;
    for (auto& request : requests) {
      batch.items += request->batch_size;
      batch.requests.push_back(std::move(request));
    }
    batch.dispatch_time = std::chrono::steady_clock::now();
    return batch;
  }

  int Count(size_t r) { return answers_[r]->count(); }

  std::vector<absl::Status> Faults() {
    std::lock_guard<std::mutex> lock(freed_mu_);
    return faults_;
  }

  bool WaitForSlotsFreed(int n) {
    std::unique_lock<std::mutex> lock(freed_mu_);
    return freed_cv_.wait_for(lock, kAsyncTimeout, [&] { return slots_freed_ >= n; });
  }

  void TearDown() override {
    shared_->Open();
    if (executor_ != nullptr) executor_->Stop();
    for (size_t i = 0; i < answers_.size(); ++i) {
      EXPECT_EQ(answers_[i]->count(), 1) << "request " << i;
    }
  }

  ModelConfig config_;
  ModelStats stats_;
  std::shared_ptr<FakeInstance::Shared> shared_;
  std::vector<std::shared_ptr<Answer>> answers_;
  std::mutex freed_mu_;
  std::condition_variable freed_cv_;
  int slots_freed_ = 0;
  std::vector<absl::Status> faults_;  // guarded by freed_mu_: what on_fault reported
  // CpuExecutorOptions::run_on_caller for Create().
  bool run_on_caller_ = false;
  std::unique_ptr<CpuExecutor> executor_;
};

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

// Inputs in device memory (engine::DeviceBytes, a CUDA shared-memory region on a GPU build whose
// model runs on the CPU backend), through a fake mapping.
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
