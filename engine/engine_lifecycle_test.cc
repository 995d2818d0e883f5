// The Engine's model lifecycle: configs refused at load (the model UNAVAILABLE with the reason
// while the others serve), versions (the newest serves by default), reloads, unloads (queued
// requests answered first).

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/engine.h"
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
using std::chrono::microseconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

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

}  // namespace
}  // namespace sluice::engine
