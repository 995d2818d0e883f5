#pragma once

// The CpuExecutor tests' shared pieces (engine/cpu/cpu_executor_*_test.cc): FakeInstance, a
// ModelInstance whose Run() the test scripts, and the CpuExecutorTest fixture (an executor over
// one FakeInstance, the requests it is given and their answers). Test-only; header-only.

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/model_stats.h"
#include "engine/cpu/cpu_executor.h"
#include "gtest/gtest.h"
#include "tests/support/engine/answer.h"
#include "tests/support/engine/async_timeout.h"

namespace sluice::engine::testing {

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

inline std::vector<std::byte> FloatBytes(const std::vector<float>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

inline std::vector<float> Floats(const std::vector<std::byte>& bytes) {
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
    absl::StatusOr<std::unique_ptr<cpu::CpuExecutor>> executor =
        cpu::CpuExecutor::Create(config_, std::make_unique<FakeInstance>(config_, shared_),
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
  std::unique_ptr<cpu::CpuExecutor> executor_;
};

}  // namespace sluice::engine::testing
