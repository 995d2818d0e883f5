#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "engine/device_fault.h"
#include "engine/fault_injection.h"
#include "engine/model_scheduler.h"
#include "engine/testing/answer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

using std::chrono::microseconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr auto kAsyncTimeout = std::chrono::seconds(10);

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
std::vector<std::byte> EncodeStrings(const std::vector<std::string>& strings) {
  std::vector<std::byte> out;
  for (const std::string& s : strings) {
    const uint32_t length = static_cast<uint32_t>(s.size());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>((length >> (8 * i)) & 0xff));
    for (char c : s) out.push_back(static_cast<std::byte>(c));
  }
  return out;
}

// --- Requests -----------------------------------------------------------------------------------

using testing::Answer;

// A request whose views point into buffers it keeps alive itself (as the server's request message
// does).
std::unique_ptr<InferenceRequest> MakeRequest(const std::string& model, int64_t version,
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
absl::StatusOr<InferenceResponse> Infer(Engine& engine, const std::string& model, int64_t version,
                                        std::vector<InputData> inputs,
                                        std::vector<std::string> outputs = {}) {
  auto answer = std::make_shared<Answer>();
  engine.Submit(
      MakeRequest(model, version, std::move(inputs), Answer::Into(answer), std::move(outputs)));
  if (!answer->Wait(kAsyncTimeout)) return absl::UnknownError("test: no answer within 10 s");
  EXPECT_EQ(answer->count(), 1);
  return answer->result();
}

// --- Models -------------------------------------------------------------------------------------

ModelConfig SimpleConfig(const std::string& name = "simple", int max_batch_size = 8) {
  ModelConfig config;
  config.name = name;
  config.backend = "simple";
  config.max_batch_size = max_batch_size;
  config.inputs = {{"INPUT0", DataType::kInt32, {16}}, {"INPUT1", DataType::kInt32, {16}}};
  config.outputs = {{"OUTPUT0", DataType::kInt32, {16}}, {"OUTPUT1", DataType::kInt32, {16}}};
  return config;
}

ModelConfig IdentityConfig(const std::string& name, DataType dtype, Shape dims, int max_batch_size,
                           std::optional<microseconds> batching_delay = std::nullopt) {
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

ModelSpec Spec(ModelConfig config, int64_t version = 1) {
  return ModelSpec{std::move(config), version, /*version_path=*/""};
}

// INPUT0, INPUT1 of `batch` x 16 random INT32 each (small enough that sums never overflow).
std::vector<InputData> SimpleInputs(int batch, std::mt19937& rng, std::vector<int32_t>* a_out,
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

std::vector<InputData> SimpleInputs(int batch = 1) {
  std::mt19937 rng(1);
  return SimpleInputs(batch, rng, nullptr, nullptr);
}

const ModelVersionStatus* FindStatus(const std::vector<ModelVersionStatus>& list,
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

// --- Validation ---------------------------------------------------------------------------------

struct RequestSpec {
  std::string model = "simple";
  int64_t version = -1;
  std::vector<InputData> inputs;
  std::vector<std::string> outputs;
};

struct InvalidCase {
  std::string name;
  std::function<void(RequestSpec&)> mutate;
  absl::StatusCode code;
  // Words the message must contain (the model and the tensor).
  std::vector<std::string> mentions;
};

TEST_F(EngineTest, InvalidRequestsAreAnsweredAtOnceWithTheReason) {
  Load(Spec(SimpleConfig()));
  const std::vector<InvalidCase> cases = {
      {"UnknownModel",
       [](RequestSpec& r) { r.model = "nope"; },
       absl::StatusCode::kNotFound,
       {"nope"}},
      {"UnknownVersion",
       [](RequestSpec& r) { r.version = 7; },
       absl::StatusCode::kNotFound,
       {"simple", "7"}},
      {"MissingInput",
       [](RequestSpec& r) { r.inputs.pop_back(); },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT1"}},
      {"UnknownInputName",
       [](RequestSpec& r) { r.inputs[1].name = "INPUTX"; },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUTX"}},
      {"ExtraInput",
       [](RequestSpec& r) {
         r.inputs.push_back({"EXTRA", DataType::kInt32, {1, 16}, r.inputs[0].data});
       },
       absl::StatusCode::kInvalidArgument,
       {"simple", "EXTRA"}},
      {"InputGivenTwice",
       [](RequestSpec& r) { r.inputs.push_back(r.inputs[0]); },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT0"}},
      {"WrongDataType",
       [](RequestSpec& r) { r.inputs[1].dtype = DataType::kFp32; },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT1", "INT32"}},
      {"WrongShape",
       [](RequestSpec& r) {
         r.inputs[0].shape = {1, 15};
         r.inputs[0].data.resize(15 * 4);
       },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT0", "16"}},
      {"MissingBatchDimension",
       [](RequestSpec& r) { r.inputs[0].shape = {16}; },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT0"}},
      {"BatchLargerThanMax",
       [](RequestSpec& r) {
         for (InputData& input : r.inputs) {
           input.shape = {9, 16};
           input.data.resize(9 * 16 * 4);
         }
       },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT0", "8"}},
      {"ZeroBatch",
       [](RequestSpec& r) {
         for (InputData& input : r.inputs) {
           input.shape = {0, 16};
           input.data.clear();
         }
       },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT0"}},
      {"BatchSizesDiffer",
       [](RequestSpec& r) {
         r.inputs[1].shape = {2, 16};
         r.inputs[1].data.resize(2 * 16 * 4);
       },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT1"}},
      {"ByteSizeMismatch",
       [](RequestSpec& r) { r.inputs[0].data.resize(60); },
       absl::StatusCode::kInvalidArgument,
       {"simple", "INPUT0", "64"}},
      {"UnknownRequestedOutput",
       [](RequestSpec& r) { r.outputs = {"OUTPUT9"}; },
       absl::StatusCode::kInvalidArgument,
       {"simple", "OUTPUT9"}},
      {"OutputRequestedTwice",
       [](RequestSpec& r) {
         r.outputs = {"OUTPUT0", "OUTPUT0"};
       },
       absl::StatusCode::kInvalidArgument,
       {"simple", "OUTPUT0"}},
  };
  for (const InvalidCase& c : cases) {
    SCOPED_TRACE(c.name);
    RequestSpec spec;
    spec.inputs = SimpleInputs(1);
    c.mutate(spec);
    auto answer = std::make_shared<Answer>();
    engine_->Submit(MakeRequest(spec.model, spec.version, std::move(spec.inputs),
                                Answer::Into(answer), std::move(spec.outputs)));
    // Rejected on the submitting thread, before Submit returned.
    ASSERT_EQ(answer->count(), 1);
    const absl::Status status = answer->result().status();
    EXPECT_EQ(status.code(), c.code) << status;
    for (const std::string& word : c.mentions) {
      EXPECT_THAT(std::string(status.message()), HasSubstr(word));
    }
  }
  // The model still serves valid requests.
  EXPECT_TRUE(Infer(*engine_, "simple", -1, SimpleInputs(1)).ok());
}

TEST_F(EngineTest, BytesInputValidated) {
  Load(Spec(IdentityConfig("strings", DataType::kBytes, {-1}, /*max_batch_size=*/0)));
  std::vector<std::byte> data = EncodeStrings({"ab", "cd"});
  data.pop_back();  // the second string is one byte short
  absl::StatusOr<InferenceResponse> response =
      Infer(*engine_, "strings", -1, {{"INPUT0", DataType::kBytes, {2}, data}});
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(response.status().message()), HasSubstr("INPUT0"));
}

// --- Model lifecycle ----------------------------------------------------------------------------

TEST_F(EngineTest, RejectedConfigIsUnavailableWhileOtherModelsServe) {
  Load(Spec(SimpleConfig("good")));
  ModelConfig bad = SimpleConfig("bad");
  bad.inputs[0].dtype = DataType::kFp32;  // simple takes INT32 only
  const absl::Status load = engine_->LoadModel(Spec(bad));
  EXPECT_EQ(load.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(load.message()), HasSubstr("INPUT0"));

  const std::vector<ModelVersionStatus> list = engine_->ListModels();
  const ModelVersionStatus* bad_status = FindStatus(list, "bad", 1);
  ASSERT_NE(bad_status, nullptr);
  EXPECT_EQ(bad_status->state, ModelState::kUnavailable);
  EXPECT_THAT(bad_status->reason, HasSubstr("INPUT0"));
  const ModelVersionStatus* good_status = FindStatus(list, "good", 1);
  ASSERT_NE(good_status, nullptr);
  EXPECT_EQ(good_status->state, ModelState::kReady);
  EXPECT_TRUE(good_status->reason.empty());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "bad");  // sorted by name
  EXPECT_EQ(list[1].name, "good");

  EXPECT_FALSE(engine_->IsModelReady("bad", -1));
  EXPECT_TRUE(engine_->IsModelReady("good", -1));
  EXPECT_TRUE(engine_->IsModelReady("good", 1));
  EXPECT_FALSE(engine_->GetModel("bad", -1).ok());

  std::mt19937 rng(1);
  std::vector<int32_t> a, b;
  absl::StatusOr<InferenceResponse> response =
      Infer(*engine_, "good", -1, SimpleInputs(1, rng, &a, &b));
  ASSERT_TRUE(response.ok()) << response.status();
  ExpectSimpleOutputs(*response, 1, a, b);

  absl::StatusOr<InferenceResponse> refused = Infer(*engine_, "bad", -1, SimpleInputs(1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(EngineTest, FixedConfigReplacesTheFailure) {
  ModelConfig bad = SimpleConfig("m");
  bad.outputs[1].dims = {8};
  EXPECT_FALSE(engine_->LoadModel(Spec(bad)).ok());
  Load(Spec(SimpleConfig("m")));
  const std::vector<ModelVersionStatus> list = engine_->ListModels();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].state, ModelState::kReady);
  EXPECT_TRUE(Infer(*engine_, "m", -1, SimpleInputs(1)).ok());
}

TEST_F(EngineTest, UnknownBackendIsNotFound) {
  ModelConfig config = SimpleConfig("mystery");
  config.backend = "tensorflow";
  const absl::Status status = engine_->LoadModel(Spec(config));
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("tensorflow"));
}

TEST_F(EngineTest, InvalidConfigIsRejected) {
  ModelConfig config = SimpleConfig("dup");
  config.outputs[1].name = "OUTPUT0";
  const absl::Status status = engine_->LoadModel(Spec(config));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(engine_->IsModelReady("dup", -1));
}

TEST_F(EngineTest, RaggedBatchingNeedsATokenBudgetOfOneOrMore) {
  for (int64_t budget : {int64_t{0}, int64_t{-5}}) {
    ModelConfig config = SimpleConfig("ragged");
    config.ragged_batching = RaggedBatchingConfig{.max_batch_tokens = budget};
    const absl::Status status = ValidateModelConfig(config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << budget;
    EXPECT_THAT(std::string(status.message()),
                HasSubstr(absl::StrCat("model 'ragged': max_batch_tokens ", budget, " is < 1")));
  }
  ModelConfig config = SimpleConfig("ragged");
  config.ragged_batching = RaggedBatchingConfig{.max_batch_tokens = 1};
  EXPECT_TRUE(ValidateModelConfig(config).ok());
}

TEST_F(EngineTest, IdentityExecuteDelayHoldsEachBatchAndBadValuesAreRefused) {
  ModelConfig config = IdentityConfig("delayed", DataType::kFp32, {2}, 8);
  config.parameters["execute_delay_ms"] = "30";
  Load(Spec(config));
  const std::vector<float> values = {1.f, 2.f};
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<InferenceResponse> answer =
      Infer(*engine_, "delayed", -1, {{"INPUT0", DataType::kFp32, {1, 2}, ToBytes(values)}});
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(FromBytes<float>(answer->outputs[0].data), values);
  // A lower bound only: the sleep cannot be shorter, however slow the machine.
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(30));

  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"execute_delay_ms", "-1"},
                                                        {"execute_delay_ms", "60001"},
                                                        {"execute_delay_ms", "soon"},
                                                        {"execute_delay", "5"}}) {
    ModelConfig bad = IdentityConfig("bad", DataType::kFp32, {2}, 8);
    bad.parameters[key] = value;
    const absl::Status status = engine_->LoadModel(Spec(bad));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << key << "=" << value;
    EXPECT_THAT(std::string(status.message()), HasSubstr(key)) << status;
  }
}

TEST_F(EngineTest, NewestVersionServesByDefault) {
  Load(Spec(SimpleConfig("v"), 1));
  Load(Spec(SimpleConfig("v"), 3));
  absl::StatusOr<Engine::ModelInfo> info = engine_->GetModel("v", -1);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->version, 3);
  EXPECT_THAT(info->ready_versions, ElementsAre(1, 3));
  EXPECT_EQ(info->config->name, "v");

  absl::StatusOr<InferenceResponse> newest = Infer(*engine_, "v", -1, SimpleInputs(1));
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(newest->model_version, 3);
  absl::StatusOr<InferenceResponse> first = Infer(*engine_, "v", 1, SimpleInputs(1));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->model_version, 1);
  EXPECT_EQ(Infer(*engine_, "v", 2, SimpleInputs(1)).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(EngineTest, ReloadingAVersionReplacesIt) {
  Load(Spec(IdentityConfig("id", DataType::kFp32, {4}, /*max_batch_size=*/8)));
  Load(Spec(IdentityConfig("id", DataType::kFp32, {4}, /*max_batch_size=*/2)));
  absl::StatusOr<Engine::ModelInfo> info = engine_->GetModel("id", 1);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->config->max_batch_size, 2);
  const std::vector<float> values(3 * 4, 1.5f);
  absl::StatusOr<InferenceResponse> response =
      Infer(*engine_, "id", -1, {{"INPUT0", DataType::kFp32, {3, 4}, ToBytes(values)}});
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EngineTest, UnloadThenSubmitIsNotFound) {
  Load(Spec(SimpleConfig()));
  ASSERT_TRUE(Infer(*engine_, "simple", -1, SimpleInputs(1)).ok());
  ASSERT_TRUE(engine_->UnloadModel("simple").ok());
  absl::StatusOr<InferenceResponse> response = Infer(*engine_, "simple", -1, SimpleInputs(1));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(engine_->IsModelReady("simple", -1));
  EXPECT_EQ(FindStatus(engine_->ListModels(), "simple", 1), nullptr);
  EXPECT_EQ(engine_->UnloadModel("simple").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine_->GetStats("simple", -1).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(EngineTest, UnloadOneVersionKeepsTheOthers) {
  Load(Spec(SimpleConfig("v"), 1));
  Load(Spec(SimpleConfig("v"), 2));
  ASSERT_TRUE(engine_->UnloadModelVersion("v", 2).ok());
  EXPECT_EQ(Infer(*engine_, "v", 2, SimpleInputs(1)).status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<InferenceResponse> newest = Infer(*engine_, "v", -1, SimpleInputs(1));
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(newest->model_version, 1);
  EXPECT_EQ(engine_->UnloadModelVersion("v", 2).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(engine_->UnloadModelVersion("v", 1).ok());
  EXPECT_EQ(Infer(*engine_, "v", -1, SimpleInputs(1)).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(EngineTest, UnloadAnswersQueuedRequests) {
  UseFakeClock();  // the batching delay never expires on its own
  Load(Spec(IdentityConfig("id", DataType::kFp32, {2}, 8, microseconds(100))));
  std::vector<std::shared_ptr<Answer>> answers;
  for (int i = 0; i < 3; ++i) {
    answers.push_back(std::make_shared<Answer>());
    const std::vector<float> values = {float(i), float(-i)};
    engine_->Submit(MakeRequest("id", -1, {{"INPUT0", DataType::kFp32, {1, 2}, ToBytes(values)}},
                                Answer::Into(answers.back())));
  }
  EXPECT_FALSE(engine_->WaitIdle(std::chrono::milliseconds(30)));
  EXPECT_EQ(answers[0]->count(), 0);

  ASSERT_TRUE(engine_->UnloadModel("id").ok());
  // UnloadModel returns after the queued requests were answered, each once.
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(answers[i]->count(), 1);
    absl::StatusOr<InferenceResponse> response = answers[i]->result();
    ASSERT_TRUE(response.ok()) << response.status();
    ASSERT_EQ(response->outputs.size(), 1u);
    EXPECT_EQ(FromBytes<float>(response->outputs[0].data),
              std::vector<float>({float(i), float(-i)}));
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
