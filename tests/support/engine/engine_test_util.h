#pragma once

// The Engine tests' shared helpers (engine/engine_*_test.cc): requests whose buffers they keep
// alive themselves, the `simple` and `identity` model configs, and the EngineTest fixture (an
// Engine, optionally on a fake clock). Test-only; header-only.

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "tests/support/engine/answer.h"
#include "tests/support/engine/async_timeout.h"

namespace sluice::engine::testing {

// --- Tensors ------------------------------------------------------------------------------------

struct InputData {
  std::string name;
  DataType dtype = DataType::kInvalid;
  Shape shape;
  std::vector<std::byte> data;
};

template <typename T>
std::vector<std::byte> ToBytes(const std::vector<T>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(T));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

template <typename T>
std::vector<T> FromBytes(const std::vector<std::byte>& bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(T));
  return values;
}

// Raw BYTES: 4-byte little-endian length, then the bytes.
inline std::vector<std::byte> EncodeStrings(const std::vector<std::string>& strings) {
  std::vector<std::byte> out;
  for (const std::string& s : strings) {
    const uint32_t length = static_cast<uint32_t>(s.size());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>((length >> (8 * i)) & 0xff));
    for (char c : s) out.push_back(static_cast<std::byte>(c));
  }
  return out;
}

// --- Requests -----------------------------------------------------------------------------------

// A request whose views point into buffers it keeps alive itself (as the server's request message
// does).
inline std::unique_ptr<InferenceRequest> MakeRequest(const std::string& model, int64_t version,
                                                     std::vector<InputData> inputs,
                                                     InferenceRequest::Completion done,
                                                     std::vector<std::string> outputs = {}) {
  auto owned = std::make_shared<std::vector<InputData>>(std::move(inputs));
  auto request = std::make_unique<InferenceRequest>(model, version, std::move(done));
  for (const InputData& input : *owned) {
    request->inputs.push_back(TensorView{input.name, input.dtype, input.shape, input.data});
  }
  request->requested_outputs = std::move(outputs);
  request->keepalive = owned;
  request->received_time = std::chrono::steady_clock::now();
  return request;
}

// Submits and waits for the answer; checks that it came exactly once.
inline absl::StatusOr<InferenceResponse> Infer(Engine& engine, const std::string& model,
                                               int64_t version, std::vector<InputData> inputs,
                                               std::vector<std::string> outputs = {}) {
  auto answer = std::make_shared<Answer>();
  engine.Submit(
      MakeRequest(model, version, std::move(inputs), Answer::Into(answer), std::move(outputs)));
  if (!answer->Wait(kAsyncTimeout)) return absl::UnknownError("test: no answer within 10 s");
  EXPECT_EQ(answer->count(), 1);
  return answer->result();
}

// --- Models -------------------------------------------------------------------------------------

inline ModelConfig SimpleConfig(const std::string& name = "simple", int max_batch_size = 8) {
  ModelConfig config;
  config.name = name;
  config.backend = "simple";
  config.max_batch_size = max_batch_size;
  config.inputs = {{"INPUT0", DataType::kInt32, {16}}, {"INPUT1", DataType::kInt32, {16}}};
  config.outputs = {{"OUTPUT0", DataType::kInt32, {16}}, {"OUTPUT1", DataType::kInt32, {16}}};
  return config;
}

inline ModelConfig IdentityConfig(
    const std::string& name, DataType dtype, Shape dims, int max_batch_size,
    std::optional<std::chrono::microseconds> batching_delay = std::nullopt) {
  ModelConfig config;
  config.name = name;
  config.backend = "identity";
  config.max_batch_size = max_batch_size;
  config.inputs = {{"INPUT0", dtype, dims}};
  config.outputs = {{"OUTPUT0", dtype, dims}};
  if (batching_delay.has_value()) {
    config.dynamic_batching = DynamicBatchingConfig{*batching_delay, {}};
  }
  return config;
}

inline ModelSpec Spec(ModelConfig config, int64_t version = 1) {
  return ModelSpec{std::move(config), version, /*version_path=*/""};
}

// INPUT0, INPUT1 of `batch` x 16 random INT32 each (small enough that sums never overflow).
inline std::vector<InputData> SimpleInputs(int batch, std::mt19937& rng,
                                           std::vector<int32_t>* a_out,
                                           std::vector<int32_t>* b_out) {
  std::uniform_int_distribution<int32_t> dist(-1000000, 1000000);
  std::vector<int32_t> a(static_cast<size_t>(batch) * 16), b(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = dist(rng);
    b[i] = dist(rng);
  }
  std::vector<InputData> inputs = {{"INPUT0", DataType::kInt32, {batch, 16}, ToBytes(a)},
                                   {"INPUT1", DataType::kInt32, {batch, 16}, ToBytes(b)}};
  if (a_out != nullptr) *a_out = std::move(a);
  if (b_out != nullptr) *b_out = std::move(b);
  return inputs;
}

inline std::vector<InputData> SimpleInputs(int batch = 1) {
  std::mt19937 rng(1);
  return SimpleInputs(batch, rng, nullptr, nullptr);
}

inline const ModelVersionStatus* FindStatus(const std::vector<ModelVersionStatus>& list,
                                            const std::string& name, int64_t version) {
  for (const ModelVersionStatus& status : list) {
    if (status.name == name && status.version == version) return &status;
  }
  return nullptr;
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override { engine_ = CreateEngine(EngineOptions{}); }

  static std::unique_ptr<Engine> CreateEngine(EngineOptions options) {
    absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? *std::move(engine) : nullptr;
  }

  // Uses an engine whose batcher runs on clock_, so queued requests wait until the test moves it.
  void UseFakeClock() {
    EngineOptions options;
    options.clock = &clock_;
    engine_ = CreateEngine(options);
  }

  void Load(ModelSpec spec) {
    const std::string name = spec.config.name;
    const absl::Status status = engine_->LoadModel(std::move(spec));
    ASSERT_TRUE(status.ok()) << name << ": " << status;
  }

  // Checks every element of a simple model's answer.
  static void ExpectSimpleOutputs(const InferenceResponse& response, int batch,
                                  const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    ASSERT_EQ(response.outputs.size(), 2u);
    const Tensor& sum = response.outputs[0];
    const Tensor& diff = response.outputs[1];
    EXPECT_EQ(sum.name, "OUTPUT0");
    EXPECT_EQ(diff.name, "OUTPUT1");
    EXPECT_EQ(sum.dtype, DataType::kInt32);
    EXPECT_EQ(diff.dtype, DataType::kInt32);
    EXPECT_EQ(sum.shape, Shape({batch, 16}));
    EXPECT_EQ(diff.shape, Shape({batch, 16}));
    const std::vector<int32_t> sums = FromBytes<int32_t>(sum.data);
    const std::vector<int32_t> diffs = FromBytes<int32_t>(diff.data);
    ASSERT_EQ(sums.size(), a.size());
    ASSERT_EQ(diffs.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(sums[i], a[i] + b[i]) << "element " << i;
      ASSERT_EQ(diffs[i], a[i] - b[i]) << "element " << i;
    }
  }

  common::FakeClock clock_{common::Clock::TimePoint{} + std::chrono::hours(1)};
  std::unique_ptr<Engine> engine_;
};

}  // namespace sluice::engine::testing
