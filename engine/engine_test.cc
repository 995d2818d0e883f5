// The Engine end to end on the CPU: the simple and identity models' answers, requested outputs,
// batches of concurrent requests (BYTES included), creation options, model state names. Model
// lifecycle, request validation, queues and drain, and executor faults have files of their own
// (engine_*_test.cc); the helpers they share are in tests/support/engine/engine_test_util.h.

#include "engine/engine.h"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/engine/answer.h"
#include "tests/support/engine/engine_test_util.h"

namespace sluice::engine {
namespace {

using ::sluice::engine::testing::Answer;
using ::sluice::engine::testing::EncodeStrings;
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

// --- Inference ----------------------------------------------------------------------------------

TEST_F(EngineTest, SimpleComputesSumAndDifference) {
  Load(Spec(SimpleConfig()));
  std::mt19937 rng(42);
  std::vector<int32_t> a, b;
  std::vector<InputData> inputs = SimpleInputs(1, rng, &a, &b);
  auto answer = std::make_shared<Answer>();
  auto request = MakeRequest("simple", -1, std::move(inputs), Answer::Into(answer));
  request->id = "req-17";
  engine_->Submit(std::move(request));
  ASSERT_TRUE(answer->Wait(kAsyncTimeout));
  EXPECT_EQ(answer->count(), 1);
  absl::StatusOr<InferenceResponse> response = answer->result();
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->model_name, "simple");
  EXPECT_EQ(response->model_version, 1);
  EXPECT_EQ(response->id, "req-17");
  ExpectSimpleOutputs(*response, 1, a, b);
}

// Issue 36: a model that resolves no parameter (Model::ResolvedParameters empty: all but the CPU
// encoder, whose case is engine_encoder_test) hands on nothing for ModelConfig to replace, nor
// for /metrics' sluice_model_info to label.
TEST_F(EngineTest, AModelThatResolvesNothingHandsOnNoResolvedParameters) {
  ModelConfig config = SimpleConfig();
  Load(Spec(config));
  absl::StatusOr<Engine::ModelInfo> info = engine_->GetModel("simple", -1);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->resolved_parameters.empty());
  EXPECT_EQ(info->config->parameters, config.parameters);
  absl::StatusOr<std::vector<Engine::VersionStats>> stats = engine_->GetStats("simple", -1);
  ASSERT_TRUE(stats.ok() && stats->size() == 1u);
  EXPECT_TRUE((*stats)[0].resolved_parameters.empty());
}

TEST_F(EngineTest, SimpleRunsABatchOfThree) {
  Load(Spec(SimpleConfig()));
  std::mt19937 rng(7);
  std::vector<int32_t> a, b;
  absl::StatusOr<InferenceResponse> response =
      Infer(*engine_, "simple", 1, SimpleInputs(3, rng, &a, &b));
  ASSERT_TRUE(response.ok()) << response.status();
  ExpectSimpleOutputs(*response, 3, a, b);
}

// Threads of this process (the engine's and the test's).
int ProcessThreads() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator("/proc/self/task")) {
    ++count;
  }
  return count;
}

// A one-instance CPU model runs its batches on its batcher thread: loading it starts that thread
// only, where the executor's issue and completion threads would be two more
// (cpu_single_instance_on_batcher false, or a second instance). Each way answers correctly.
TEST_F(EngineTest, OneCpuInstanceRunsOnItsBatcherThreadAndSeveralKeepTheirThreads) {
  struct Case {
    bool on_batcher;
    int instances;
    int threads;  // started by the load
  };
  for (const Case& c : {Case{true, 1, 1}, Case{false, 1, 3}, Case{true, 2, 5}}) {
    SCOPED_TRACE(::testing::Message()
                 << "on_batcher " << c.on_batcher << ", instances " << c.instances);
    EngineOptions options;
    options.cpu_single_instance_on_batcher = c.on_batcher;
    engine_ = CreateEngine(options);
    ASSERT_NE(engine_, nullptr);
    const int before = ProcessThreads();
    ModelConfig config = SimpleConfig();
    config.instance_count = c.instances;
    Load(Spec(config));
    EXPECT_EQ(ProcessThreads() - before, c.threads);
    std::mt19937 rng(3);
    for (int batch : {1, 3}) {
      std::vector<int32_t> a, b;
      absl::StatusOr<InferenceResponse> response =
          Infer(*engine_, "simple", 1, SimpleInputs(batch, rng, &a, &b));
      ASSERT_TRUE(response.ok()) << response.status();
      ExpectSimpleOutputs(*response, batch, a, b);
    }
    engine_.reset();
  }
}

TEST_F(EngineTest, SimpleWithoutBatchDimension) {
  Load(Spec(SimpleConfig("simple_nobatch", /*max_batch_size=*/0)));
  std::mt19937 rng(9);
  std::vector<int32_t> a, b;
  std::vector<InputData> inputs = SimpleInputs(1, rng, &a, &b);
  for (InputData& input : inputs) input.shape = {16};
  absl::StatusOr<InferenceResponse> response =
      Infer(*engine_, "simple_nobatch", -1, std::move(inputs));
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->outputs.size(), 2u);
  EXPECT_EQ(response->outputs[0].shape, Shape({16}));
  EXPECT_EQ(FromBytes<int32_t>(response->outputs[0].data)[5], a[5] + b[5]);
  EXPECT_EQ(FromBytes<int32_t>(response->outputs[1].data)[15], a[15] - b[15]);
}

TEST_F(EngineTest, InputsInAnyOrder) {
  Load(Spec(SimpleConfig()));
  std::mt19937 rng(3);
  std::vector<int32_t> a, b;
  std::vector<InputData> inputs = SimpleInputs(2, rng, &a, &b);
  std::swap(inputs[0], inputs[1]);  // INPUT1 first
  absl::StatusOr<InferenceResponse> response = Infer(*engine_, "simple", -1, std::move(inputs));
  ASSERT_TRUE(response.ok()) << response.status();
  ExpectSimpleOutputs(*response, 2, a, b);
}

TEST_F(EngineTest, RequestedOutputSubsetAndOrder) {
  Load(Spec(SimpleConfig()));
  std::mt19937 rng(5);
  std::vector<int32_t> a, b;
  std::vector<InputData> inputs = SimpleInputs(1, rng, &a, &b);

  absl::StatusOr<InferenceResponse> only_diff = Infer(*engine_, "simple", -1, inputs, {"OUTPUT1"});
  ASSERT_TRUE(only_diff.ok()) << only_diff.status();
  ASSERT_EQ(only_diff->outputs.size(), 1u);
  EXPECT_EQ(only_diff->outputs[0].name, "OUTPUT1");
  EXPECT_EQ(FromBytes<int32_t>(only_diff->outputs[0].data)[0], a[0] - b[0]);

  absl::StatusOr<InferenceResponse> reversed =
      Infer(*engine_, "simple", -1, inputs, {"OUTPUT1", "OUTPUT0"});
  ASSERT_TRUE(reversed.ok()) << reversed.status();
  ASSERT_EQ(reversed->outputs.size(), 2u);
  EXPECT_EQ(reversed->outputs[0].name, "OUTPUT1");
  EXPECT_EQ(reversed->outputs[1].name, "OUTPUT0");
  const std::vector<int32_t> diffs = FromBytes<int32_t>(reversed->outputs[0].data);
  const std::vector<int32_t> sums = FromBytes<int32_t>(reversed->outputs[1].data);
  ASSERT_EQ(sums.size(), 16u);
  ASSERT_EQ(diffs.size(), 16u);
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(sums[i], a[i] + b[i]);
    EXPECT_EQ(diffs[i], a[i] - b[i]);
  }
}

TEST_F(EngineTest, RequestedOutputsHonouredInsideABatch) {
  // Several requests share a batch; each gets only the outputs it named, in its order.
  ModelConfig config = SimpleConfig("simple_batched");
  config.dynamic_batching = DynamicBatchingConfig{microseconds(20000), {}};
  Load(Spec(config));
  std::mt19937 rng(11);
  const std::vector<std::vector<std::string>> wanted = {
      {}, {"OUTPUT1"}, {"OUTPUT0"}, {"OUTPUT1", "OUTPUT0"}};
  std::vector<std::vector<int32_t>> as(wanted.size()), bs(wanted.size());
  std::vector<std::shared_ptr<Answer>> answers;
  for (size_t r = 0; r < wanted.size(); ++r) {
    answers.push_back(std::make_shared<Answer>());
    engine_->Submit(MakeRequest("simple_batched", -1, SimpleInputs(1, rng, &as[r], &bs[r]),
                                Answer::Into(answers[r]), wanted[r]));
  }
  for (size_t r = 0; r < wanted.size(); ++r) {
    SCOPED_TRACE(r);
    ASSERT_TRUE(answers[r]->Wait(kAsyncTimeout));
    absl::StatusOr<InferenceResponse> response = answers[r]->result();
    ASSERT_TRUE(response.ok()) << response.status();
    const std::vector<std::string> names =
        wanted[r].empty() ? std::vector<std::string>{"OUTPUT0", "OUTPUT1"} : wanted[r];
    ASSERT_EQ(response->outputs.size(), names.size());
    for (size_t o = 0; o < names.size(); ++o) {
      const Tensor& out = response->outputs[o];
      EXPECT_EQ(out.name, names[o]);
      EXPECT_EQ(out.shape, Shape({1, 16}));
      const std::vector<int32_t> values = FromBytes<int32_t>(out.data);
      ASSERT_EQ(values.size(), 16u);
      for (size_t i = 0; i < 16; ++i) {
        const int32_t expected = names[o] == "OUTPUT0" ? as[r][i] + bs[r][i] : as[r][i] - bs[r][i];
        ASSERT_EQ(values[i], expected) << names[o] << "[" << i << "]";
      }
    }
  }
}

// --- Identity, BYTES and batching ---------------------------------------------------------------

TEST_F(EngineTest, IdentityRoundTripsStrings) {
  Load(Spec(IdentityConfig("strings", DataType::kBytes, {-1}, /*max_batch_size=*/0)));
  const std::vector<std::string> strings = {"hello", "", std::string("nul\0byte", 8),
                                            std::string(1000, 'x'), "w\xc3\xb6rld"};
  const std::vector<std::byte> data = EncodeStrings(strings);
  absl::StatusOr<InferenceResponse> response =
      Infer(*engine_, "strings", -1, {{"INPUT0", DataType::kBytes, {5}, data}});
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->outputs.size(), 1u);
  EXPECT_EQ(response->outputs[0].name, "OUTPUT0");
  EXPECT_EQ(response->outputs[0].dtype, DataType::kBytes);
  EXPECT_EQ(response->outputs[0].shape, Shape({5}));
  EXPECT_EQ(response->outputs[0].data, data);
}

TEST_F(EngineTest, IdentityBatchesStringsWithoutMixingThem) {
  Load(Spec(IdentityConfig("strings", DataType::kBytes, {-1}, 8, microseconds(5000))));
  constexpr int kThreads = 4;
  constexpr int kPerThread = 25;
  std::vector<std::shared_ptr<Answer>> answers(kThreads * kPerThread);
  std::vector<std::vector<std::byte>> sent(answers.size());
  for (size_t r = 0; r < answers.size(); ++r) {
    answers[r] = std::make_shared<Answer>();
    // Two strings per item, of lengths that differ request to request.
    sent[r] = EncodeStrings({"r" + std::to_string(r) + std::string(r % 7, 'a'),
                             std::string(r % 5, 'z') + "#" + std::to_string(r)});
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const size_t r = static_cast<size_t>(t * kPerThread + i);
        engine_->Submit(MakeRequest("strings", -1, {{"INPUT0", DataType::kBytes, {1, 2}, sent[r]}},
                                    Answer::Into(answers[r])));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (size_t r = 0; r < answers.size(); ++r) {
    SCOPED_TRACE(r);
    ASSERT_TRUE(answers[r]->Wait(kAsyncTimeout));
    EXPECT_EQ(answers[r]->count(), 1);
    absl::StatusOr<InferenceResponse> response = answers[r]->result();
    ASSERT_TRUE(response.ok()) << response.status();
    ASSERT_EQ(response->outputs.size(), 1u);
    EXPECT_EQ(response->outputs[0].shape, Shape({1, 2}));
    EXPECT_EQ(response->outputs[0].data, sent[r]);
  }
}

TEST_F(EngineTest, IdentityBatchesConcurrentRequestsAndAnswersEachWithItsOwnData) {
  ModelConfig config = IdentityConfig("batched", DataType::kFp32, {-1}, 8, microseconds(2000));
  Load(Spec(config));
  constexpr int kThreads = 5;
  constexpr int kPerThread = 100;
  constexpr int kRequests = kThreads * kPerThread;
  struct Sent {
    Shape shape;
    std::vector<float> values;
  };
  std::vector<Sent> sent(kRequests);
  uint64_t total_items = 0;
  for (int r = 0; r < kRequests; ++r) {
    const int batch = 1 + r % 3;        // 1..3 items
    const int width = 4 + (r / 3) % 2;  // two per-item shapes, never batched together
    sent[r].shape = {batch, width};
    for (int j = 0; j < batch * width; ++j) sent[r].values.push_back(r * 1000.0f + j);
    total_items += static_cast<uint64_t>(batch);
  }
  std::vector<std::shared_ptr<Answer>> answers(kRequests);
  for (auto& answer : answers) answer = std::make_shared<Answer>();

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int r = i * kThreads + t;  // interleave the threads' shapes
        engine_->Submit(MakeRequest(
            "batched", -1, {{"INPUT0", DataType::kFp32, sent[r].shape, ToBytes(sent[r].values)}},
            Answer::Into(answers[r])));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  for (int r = 0; r < kRequests; ++r) {
    SCOPED_TRACE(r);
    ASSERT_TRUE(answers[r]->Wait(kAsyncTimeout));
    ASSERT_EQ(answers[r]->count(), 1);
    absl::StatusOr<InferenceResponse> response = answers[r]->result();
    ASSERT_TRUE(response.ok()) << response.status();
    ASSERT_EQ(response->outputs.size(), 1u);
    EXPECT_EQ(response->outputs[0].name, "OUTPUT0");
    EXPECT_EQ(response->outputs[0].shape, sent[r].shape);
    ASSERT_EQ(FromBytes<float>(response->outputs[0].data), sent[r].values);
  }

  ASSERT_TRUE(engine_->WaitIdle(std::chrono::seconds(10)));
  absl::StatusOr<std::vector<Engine::VersionStats>> stats = engine_->GetStats("batched", -1);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 1u);
  const ModelStatsSnapshot& s = (*stats)[0].stats;
  EXPECT_EQ((*stats)[0].name, "batched");
  EXPECT_EQ((*stats)[0].version, 1);
  EXPECT_EQ(s.inference_count, total_items);
  EXPECT_EQ(s.success.count, static_cast<uint64_t>(kRequests));
  EXPECT_EQ(s.fail.count, 0u);
  EXPECT_EQ(s.queue.count, static_cast<uint64_t>(kRequests));
  // Requests were batched (fewer batches than requests), and never beyond max_batch_size.
  EXPECT_GT(s.execution_count, 0u);
  EXPECT_LT(s.execution_count, static_cast<uint64_t>(kRequests));
  uint64_t batches = 0;
  uint64_t items = 0;
  for (const auto& [size, batch_stat] : s.batch_stats) {
    EXPECT_GE(size, 1u);
    EXPECT_LE(size, 8u);
    batches += batch_stat.compute_infer.count;
    items += size * batch_stat.compute_infer.count;
  }
  EXPECT_EQ(batches, s.execution_count);
  EXPECT_EQ(items, total_items);
  EXPECT_EQ(s.queue_depth, 0u);
}

TEST(EngineCreateTest, RejectsBadOptions) {
  EngineOptions no_clock;
  no_clock.clock = nullptr;
  EXPECT_FALSE(Engine::Create(no_clock).ok());
  EngineOptions no_queue;
  no_queue.default_max_queue_size = 0;
  EXPECT_FALSE(Engine::Create(no_queue).ok());
  EngineOptions no_slots;
  no_slots.executor_slots = 0;
  EXPECT_FALSE(Engine::Create(no_slots).ok());
}

TEST(EngineStateTest, ModelStateNames) {
  EXPECT_EQ(ModelStateName(ModelState::kLoading), "LOADING");
  EXPECT_EQ(ModelStateName(ModelState::kReady), "READY");
  EXPECT_EQ(ModelStateName(ModelState::kUnloading), "UNLOADING");
  EXPECT_EQ(ModelStateName(ModelState::kUnavailable), "UNAVAILABLE");
}

}  // namespace
}  // namespace sluice::engine
