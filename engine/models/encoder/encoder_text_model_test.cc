// The encoder backend's text inputs through the engine API on tiny checkpoints with a WordPiece
// tokenizer written here: the completed config, token ids answered, bad text requests, and
// requests cancelled or expired while waiting for the tokenizer pool.

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/models/encoder/encoder_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/engine/answer.h"
#include "tests/support/engine/encoder_checkpoint.h"

namespace sluice::engine::models {
namespace {

using namespace test_support;  // NOLINT: the shared checkpoints and fixture
using ::testing::HasSubstr;

class EncoderTextTest : public EncoderModelTest {
 protected:
  void SetUp() override {
    EncoderModelTest::SetUp();
    auto engine = Engine::Create(EngineOptions{.preparation_threads = 2});
    ASSERT_TRUE(engine.ok());
    engine_ = *std::move(engine);
    const std::string folder = Write(TinyBert(9));
    // 20 tokens (kVocab): ids 0..4 the specials, then words and pieces.
    std::ofstream(fs::path(folder) / "vocab.txt")
        << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\nthe\nqueue\n##s\n"
           "a\nb\nc\n!\n,\ncafe\nx\ny\nz\n##z\n";
    ModelConfig config;
    config.dynamic_batching = DynamicBatchingConfig{};
    const absl::Status loaded = engine_->LoadModel(Spec(folder, config));
    ASSERT_TRUE(loaded.ok()) << loaded;
  }
  void TearDown() override {
    engine_.reset();
    EncoderModelTest::TearDown();
  }

  static std::vector<std::byte> BytesTensor(const std::vector<std::string>& strings) {
    std::vector<std::byte> out;
    for (const std::string& s : strings) {
      const uint32_t n = static_cast<uint32_t>(s.size());
      const size_t at = out.size();
      out.resize(at + 4 + s.size());
      std::memcpy(out.data() + at, &n, 4);
      std::memcpy(out.data() + at + 4, s.data(), s.size());
    }
    return out;
  }

  absl::StatusOr<InferenceResponse> InferText(
      const std::vector<std::string>& text, const std::vector<std::string>& pair = {},
      std::vector<std::string> outputs = {}, bool with_ids = false,
      const std::function<void(InferenceRequest&)>& adjust = nullptr) {
    auto answer = std::make_shared<testing::Answer>();
    auto request = std::make_unique<InferenceRequest>("m", -1, testing::Answer::Into(answer));
    if (adjust) adjust(*request);
    auto owned = std::make_shared<std::vector<std::vector<std::byte>>>();
    owned->reserve(3);
    const int64_t n = static_cast<int64_t>(text.size());
    owned->push_back(BytesTensor(text));
    request->inputs.push_back(TensorView{"text", DataType::kBytes, {n, 1}, owned->back()});
    if (!pair.empty()) {
      owned->push_back(BytesTensor(pair));
      request->inputs.push_back(TensorView{
          "text_pair", DataType::kBytes, {static_cast<int64_t>(pair.size()), 1}, owned->back()});
    }
    if (with_ids) {
      owned->push_back(Int64Bytes({2, 5, 3}));
      request->inputs.push_back(TensorView{"input_ids", DataType::kInt64, {1, 3}, owned->back()});
    }
    request->keepalive = owned;
    request->requested_outputs = std::move(outputs);
    engine_->Submit(std::move(request));
    return answer->WaitForResult(std::chrono::seconds(30));
  }

  absl::StatusOr<InferenceResponse> InferIds(const std::vector<int64_t>& ids,
                                             const std::vector<int64_t>& types) {
    auto answer = std::make_shared<testing::Answer>();
    auto request = std::make_unique<InferenceRequest>("m", -1, testing::Answer::Into(answer));
    auto owned = std::make_shared<std::vector<std::vector<std::byte>>>();
    owned->push_back(Int64Bytes(ids));
    owned->push_back(Int64Bytes(types));
    const int64_t n = static_cast<int64_t>(ids.size());
    request->inputs.push_back(TensorView{"input_ids", DataType::kInt64, {1, n}, (*owned)[0]});
    request->inputs.push_back(TensorView{"token_type_ids", DataType::kInt64, {1, n}, (*owned)[1]});
    request->keepalive = owned;
    request->requested_outputs = {"embedding"};
    engine_->Submit(std::move(request));
    return answer->WaitForResult(std::chrono::seconds(30));
  }

  static std::vector<int64_t> Int64s(const Tensor& tensor) {
    std::vector<int64_t> out(tensor.data.size() / 8);
    std::memcpy(out.data(), tensor.data.data(), tensor.data.size());
    return out;
  }

  std::unique_ptr<Engine> engine_;
};

TEST_F(EncoderTextTest, ConfigListsTextInputsAndInputIdsOutput) {
  auto info = engine_->GetModel("m", -1);
  ASSERT_TRUE(info.ok());
  const ModelConfig& config = *info->config;
  ASSERT_NE(config.FindInput("text"), nullptr);
  EXPECT_EQ(config.FindInput("text")->dtype, DataType::kBytes);
  EXPECT_EQ(config.FindInput("text")->dims, (Shape{1}));
  ASSERT_NE(config.FindInput("text_pair"), nullptr);
  ASSERT_NE(config.FindOutput("input_ids"), nullptr);
  EXPECT_EQ(config.FindOutput("input_ids")->dtype, DataType::kInt64);
}

TEST_F(EncoderTextTest, TextGivesTheTokenIdsAnswer) {
  auto text = InferText({"Hello, world!", "the queues"}, {}, {"input_ids", "embedding"});
  ASSERT_TRUE(text.ok()) << text.status();
  ASSERT_EQ(text->outputs.size(), 2u);
  EXPECT_EQ(text->outputs[0].shape, (Shape{2, 6}));
  // [CLS] hello , world ! [SEP] / [CLS] the queue ##s [SEP] 0
  EXPECT_EQ(Int64s(text->outputs[0]), (std::vector<int64_t>{2, 5, 14, 6, 13, 3, 2, 7, 8, 9, 3, 0}));
  auto ids = InferIds({2, 7, 8, 9, 3}, {0, 0, 0, 0, 0});
  ASSERT_TRUE(ids.ok()) << ids.status();
  const std::vector<float> both = Floats(text->outputs[1]);
  const std::vector<float> second(both.begin() + kHidden, both.end());
  EXPECT_LT(RelErr(second, Floats(ids->outputs[0])), 1e-5);

  // A pair: [CLS] hello [SEP] world [SEP], token types 0 0 0 1 1.
  auto pair = InferText({"hello"}, {"world"}, {"input_ids", "embedding"});
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_EQ(Int64s(pair->outputs[0]), (std::vector<int64_t>{2, 5, 3, 6, 3}));
  auto pair_ids = InferIds({2, 5, 3, 6, 3}, {0, 0, 0, 1, 1});
  ASSERT_TRUE(pair_ids.ok()) << pair_ids.status();
  EXPECT_LT(RelErr(Floats(pair->outputs[1]), Floats(pair_ids->outputs[0])), 1e-5);

  // Over the position table (16): a vocab.txt has no truncation block, so it is refused, naming
  // the limit and the item.
  auto too_long = InferText({"a", "a b c a b c a b c a b c a b c a b c a b c"}, {}, {"input_ids"});
  ASSERT_FALSE(too_long.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(too_long.status())) << too_long.status();
  EXPECT_THAT(too_long.status().message(), HasSubstr("batch item 1"));
  EXPECT_THAT(too_long.status().message(), HasSubstr("limit of 16"));

  // The preparation stage counts the two text requests it tokenized (three items) and the one it
  // refused; the ids request never reached it.
  auto stats = engine_->GetStats("m", -1);
  ASSERT_TRUE(stats.ok());
  ASSERT_TRUE(stats->front().stats.prepares);
  const PreparationStats& stage = stats->front().stats.preparation;
  EXPECT_EQ(stage.success.count, 2u);
  EXPECT_EQ(stage.jobs, 2u);
  EXPECT_EQ(stage.items, 3u);
  EXPECT_EQ(stage.queue.count, 2u);
  EXPECT_EQ(stage.compute.count, 2u);
  EXPECT_EQ(stage.fail.count, 1u);
  EXPECT_GT(stage.compute.ns, 0u);
  EXPECT_LE(stage.queue.ns + stage.compute.ns, stage.success.ns);
  EXPECT_GT(stage.last_prepared_ms, 0u);
  ASSERT_EQ(stage.compute_by_items.size(), 2u);  // one job of 2 items, one of 1
  EXPECT_EQ(stage.compute_by_items.at(1).count, 1u);
  EXPECT_EQ(stage.compute_by_items.at(2).count, 1u);
  EXPECT_EQ(stats->front().stats.tokenize_duration.count, 2u);
}

TEST_F(EncoderTextTest, BadTextRequestsAreInvalidArgument) {
  auto both = InferText({"hello"}, {}, {}, /*with_ids=*/true);
  ASSERT_FALSE(both.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(both.status())) << both.status();
  EXPECT_THAT(both.status().message(), HasSubstr("both text and token ids"));

  auto utf8 = InferText({"fine", "bad \xff bytes"});
  ASSERT_FALSE(utf8.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(utf8.status())) << utf8.status();
  EXPECT_THAT(utf8.status().message(), HasSubstr("batch item 1"));
  EXPECT_THAT(utf8.status().message(), HasSubstr("UTF-8"));

  auto pairs = InferText({"a", "b"}, {"c"});
  ASSERT_FALSE(pairs.ok());
  EXPECT_THAT(pairs.status().message(), HasSubstr("one pair per batch item"));

  EXPECT_TRUE(InferText({"hello"}).ok());  // still serving
}

TEST_F(EncoderTextTest, CancelledOrExpiredWhileWaitingForTokenizationIsNotTokenized) {
  auto cancelled = InferText({"hello"}, {}, {}, false, [](InferenceRequest& request) {
    request.cancelled = std::make_shared<const std::atomic<bool>>(true);
  });
  ASSERT_FALSE(cancelled.ok());
  EXPECT_TRUE(absl::IsCancelled(cancelled.status())) << cancelled.status();
  EXPECT_THAT(cancelled.status().message(), HasSubstr("tokenization"));
  auto expired = InferText({"hello"}, {}, {}, false, [](InferenceRequest& request) {
    request.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  });
  ASSERT_FALSE(expired.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(expired.status())) << expired.status();
  auto stats = engine_->GetStats("m", -1);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->front().stats.preparation.success.count, 0u);  // neither was tokenized
  EXPECT_EQ(stats->front().stats.preparation.fail.count, 2u);     // both failed in the stage
  EXPECT_EQ(stats->front().stats.preparation.compute.count, 0u);
  EXPECT_EQ(stats->front().stats.fail.count, 2u);
}

}  // namespace
}  // namespace sluice::engine::models
