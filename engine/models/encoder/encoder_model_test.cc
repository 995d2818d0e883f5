// The encoder backend through the engine API on tiny checkpoints written here (HF names and
// layout): config completion, load errors, request validation, and the packed-batch properties
// (a sequence's answer independent of its batch-mates, trailing padding equal to no padding,
// INT32 = INT64). Numerics against Hugging Face itself:
// tests/integration/encoder_reference_test.py.

#include "engine/models/encoder/encoder_model.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/backend.h"
#include "engine/engine.h"
#include "engine/models/encoder/encoder_forward.h"
#include "engine/models/encoder/encoder_network.h"
#include "engine/models/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/engine/answer.h"
#include "tests/support/engine/encoder_checkpoint.h"

namespace sluice::engine::models {
namespace {

using namespace test_support;  // NOLINT: the shared checkpoints and fixture
using ::testing::HasSubstr;

TEST_F(EncoderModelTest, CompletesConfigFromCheckpoint) {
  absl::StatusOr<ModelConfig> config = CompleteEncoderConfig(Spec(Write(TinyBert())));
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->inputs.size(), 3u);
  EXPECT_EQ(config->inputs[0].name, "input_ids");
  EXPECT_EQ(config->inputs[0].dtype, DataType::kInt64);
  EXPECT_EQ(config->inputs[2].name, "token_type_ids");
  ASSERT_EQ(config->outputs.size(), 3u);
  EXPECT_EQ(config->outputs[0].name, "last_hidden_state");
  EXPECT_EQ(config->outputs[0].dims, (Shape{-1, kHidden}));
  EXPECT_EQ(config->outputs[1].name, "embedding");
  EXPECT_EQ(config->outputs[2].name, "pooler_output");
  ASSERT_TRUE(config->ragged_batching.has_value());
  EXPECT_EQ(config->ragged_batching->max_batch_tokens, kDefaultEncoderMaxBatchTokens);

  ModelConfig declared;
  declared.outputs.push_back({"logits", DataType::kFp32, {3}});
  absl::StatusOr<ModelConfig> bad = CompleteEncoderConfig(Spec(Write(TinyBert()), declared));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("output 'logits' is declared"));
  EXPECT_THAT(bad.status().message(), HasSubstr("classification head"));

  ModelConfig tokens;
  tokens.parameters["max_batch_tokens"] = "0";
  EXPECT_THAT(CompleteEncoderConfig(Spec(Write(TinyBert()), tokens)).status().message(),
              HasSubstr("max_batch_tokens"));
}

// The README's three-line config batches: an encoder without a dynamic_batching block gets one with
// no queue delay (work-conserving); a config's own block is kept as it is.
TEST_F(EncoderModelTest, BatchesByDefaultUnlessTheConfigSaysOtherwise) {
  absl::StatusOr<ModelConfig> plain = CompleteEncoderConfig(Spec(Write(TinyBert())));
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(plain->dynamic_batching.has_value());
  EXPECT_EQ(plain->dynamic_batching->max_queue_delay, std::chrono::microseconds(0));
  EXPECT_TRUE(plain->dynamic_batching->preferred_batch_sizes.empty());

  ModelConfig own;
  own.dynamic_batching = DynamicBatchingConfig{.max_queue_delay = std::chrono::microseconds(500),
                                               .preferred_batch_sizes = {4}};
  absl::StatusOr<ModelConfig> kept = CompleteEncoderConfig(Spec(Write(TinyBert()), own));
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_TRUE(kept->dynamic_batching.has_value());
  EXPECT_EQ(kept->dynamic_batching->max_queue_delay, std::chrono::microseconds(500));
  EXPECT_EQ(kept->dynamic_batching->preferred_batch_sizes, std::vector<int>{4});
}

TEST_F(EncoderModelTest, LoadErrorsNameTensorAndShapes) {
  Checkpoint missing = TinyBert();
  missing.tensors.erase("encoder.layer.1.output.dense.bias");
  ModelSpec spec = Spec(Write(missing, "missing"));
  absl::StatusOr<std::unique_ptr<Model>> model = CreateEncoderModel(spec);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("'encoder.layer.1.output.dense.bias'"));
  EXPECT_THAT(model.status().message(), HasSubstr("[8]"));

  Checkpoint misshaped = TinyBert();
  misshaped.tensors["encoder.layer.0.intermediate.dense.weight"].first = {kInter / 2, kHidden * 2};
  model = CreateEncoderModel(Spec(Write(misshaped, "misshaped")));
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("has shape [8,16], config.json needs [16,8]"));

  Checkpoint gpt = TinyBert();
  gpt.model_type = "gpt2";
  model = CreateEncoderModel(Spec(Write(gpt, "gpt")));
  EXPECT_THAT(model.status().message(), HasSubstr("model_type 'gpt2' is not supported"));

  Checkpoint swish = TinyBert();
  swish.hidden_act = "swish";
  model = CreateEncoderModel(Spec(Write(swish, "swish")));
  EXPECT_THAT(model.status().message(), HasSubstr("hidden_act 'swish'"));

  EXPECT_TRUE(absl::IsNotFound(CreateEncoderModel(Spec((dir_ / "nothing").string())).status()));
}

TEST_F(EncoderModelTest, LegacyGammaBetaAndPrefixAccepted) {
  Checkpoint plain = TinyBert();
  Checkpoint renamed;
  for (auto& [name, entry] : plain.tensors) {
    std::string n = name;
    if (n.ends_with("LayerNorm.weight")) n = n.substr(0, n.size() - 6) + "gamma";
    if (n.ends_with("LayerNorm.bias")) n = n.substr(0, n.size() - 4) + "beta";
    renamed.tensors["bert." + n] = entry;
  }
  renamed.tensors["cls.predictions.bias"] = {{kVocab}, std::vector<float>(kVocab, 0.5f)};
  auto a = CreateEncoderModel(Spec(Write(plain, "plain")));
  auto b = CreateEncoderModel(Spec(Write(renamed, "renamed")));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  Input in;
  in.Add("input_ids", {1, 3}, {2, 3, 4});
  auto ia = (*a)->CreateInstance(0);
  auto ib = (*b)->CreateInstance(0);
  auto ra = (*ia)->Run(in.views);
  auto rb = (*ib)->Run(in.views);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(Floats((*ra)[0]), Floats((*rb)[0]));
}

TEST_F(EncoderModelTest, NormalizeParameter) {
  const std::string folder = Write(TinyBert());
  Input in;
  in.Add("input_ids", {1, 3}, {2, 3, 4});
  for (const char* value : {"true", "false"}) {
    ModelConfig config;
    config.parameters["normalize"] = value;
    auto model = CreateEncoderModel(Spec(folder, config));
    ASSERT_TRUE(model.ok()) << model.status();
    auto instance = (*model)->CreateInstance(0);
    auto out = (*instance)->Run(in.views);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ((*out)[1].name, "embedding");
    double squares = 0;
    for (float v : Floats((*out)[1])) squares += double{v} * v;
    if (std::string(value) == "true") {
      EXPECT_NEAR(squares, 1.0, 1e-5);
    } else {
      EXPECT_GT(std::abs(squares - 1.0), 1e-3);
    }
  }
  ModelConfig bad;
  bad.parameters["normalize"] = "yes";
  EXPECT_THAT(CreateEncoderModel(Spec(folder, bad)).status().message(),
              HasSubstr("'normalize' = 'yes'"));
}

// The forward pass takes a large batch through the layers in chunks of whole sequences (cache
// locality, encoder_forward.cc); every chunking must give the bits of one pass over the batch.
TEST_F(EncoderModelTest, ChunkedForwardPassGivesTheBitsOfOnePass) {
  absl::StatusOr<std::shared_ptr<const encoder::EncoderNetwork>> net =
      encoder::LoadEncoderNetwork(Write(TinyBert(3)), encoder::EncoderLoadOptions{});
  ASSERT_TRUE(net.ok()) << net.status();
  encoder::PackedBatch batch;
  std::mt19937 rng(5);
  for (int n : {3, 9, 1, 16, 7, 2, 12}) {
    for (int i = 0; i < n; ++i) {
      batch.token_ids.push_back(static_cast<int32_t>(rng() % kVocab));
      batch.token_types.push_back(i % 2);
      batch.positions.push_back(i);
      batch.attend.push_back(i == 1 && n > 2 ? 0 : 1);  // a masked token inside the sequence
    }
    batch.offsets.push_back(batch.offsets.back() + n);
  }
  encoder::EncoderWorkspace whole;
  encoder::Forward(**net, batch, whole, std::numeric_limits<int64_t>::max());
  const std::vector<float> expected(whole.hidden(), whole.hidden() + batch.tokens() * kHidden);
  // 1: a chunk per sequence; 8: the 9- and 16-token sequences alone, the others grouped; 31, 50:
  // chunks of several sequences of every length.
  for (int64_t chunk : {1, 8, 16, 31, 50}) {
    encoder::EncoderWorkspace ws;
    encoder::Forward(**net, batch, ws, chunk);
    const std::vector<float> got(ws.hidden(), ws.hidden() + batch.tokens() * kHidden);
    EXPECT_EQ(got, expected) << "chunks of at most " << chunk << " tokens";
  }
  // A workspace first sized by a small chunking, then reused for the whole batch at once.
  encoder::EncoderWorkspace reused;
  encoder::Forward(**net, batch, reused, 1);
  encoder::Forward(**net, batch, reused, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(std::vector<float>(reused.hidden(), reused.hidden() + batch.tokens() * kHidden),
            expected);
}

// Over a compute pool (attention by sequence and head, row-wise kernels by row blocks, GEMMs by
// panels where large enough) the forward pass gives the same bits as on one thread, whatever the
// chunking, and a workspace sized for fewer workers grows.
TEST_F(EncoderModelTest, PooledForwardPassGivesTheBitsOfOneThread) {
  absl::StatusOr<std::shared_ptr<const encoder::EncoderNetwork>> net =
      encoder::LoadEncoderNetwork(Write(TinyBert(3)), encoder::EncoderLoadOptions{});
  ASSERT_TRUE(net.ok()) << net.status();
  encoder::PackedBatch batch;
  std::mt19937 rng(7);
  for (int n : {3, 9, 1, 16, 7, 2, 12, 16, 5, 15, 16, 16, 11}) {
    for (int i = 0; i < n; ++i) {
      batch.token_ids.push_back(static_cast<int32_t>(rng() % kVocab));
      batch.token_types.push_back(i % 2);
      batch.positions.push_back(i);
      batch.attend.push_back(i == 1 && n > 2 ? 0 : 1);
    }
    batch.offsets.push_back(batch.offsets.back() + n);
  }
  encoder::EncoderWorkspace serial;
  encoder::Forward(**net, batch, serial, std::numeric_limits<int64_t>::max());
  const std::vector<float> expected(serial.hidden(), serial.hidden() + batch.tokens() * kHidden);
  encoder::EncoderWorkspace ws;
  for (int threads : {1, 2, 4}) {
    ComputePool pool(threads);
    for (int64_t chunk : {int64_t{16}, std::numeric_limits<int64_t>::max()}) {
      encoder::Forward(**net, batch, ws, chunk, &pool);
      const std::vector<float> got(ws.hidden(), ws.hidden() + batch.tokens() * kHidden);
      size_t first_diff = 0;
      while (first_diff < got.size() && got[first_diff] == expected[first_diff]) ++first_diff;
      EXPECT_EQ(first_diff, got.size())
          << threads << " threads, chunks of " << chunk << " tokens: first difference at token "
          << first_diff / kHidden << " (" << got[std::min(first_diff, got.size() - 1)] << " vs "
          << expected[std::min(first_diff, got.size() - 1)] << ")";
    }
  }
}

class EncoderEngineTest : public EncoderModelTest {
 protected:
  void SetUp() override {
    EncoderModelTest::SetUp();
    auto engine = Engine::Create(EngineOptions{});
    ASSERT_TRUE(engine.ok());
    engine_ = *std::move(engine);
    ModelConfig config;
    config.dynamic_batching = DynamicBatchingConfig{};
    ASSERT_TRUE(engine_->LoadModel(Spec(Write(TinyBert(7)), config)).ok());
  }
  void TearDown() override {
    engine_.reset();
    EncoderModelTest::TearDown();
  }

  // Submits and waits; inputs are (name, shape, values).
  absl::StatusOr<InferenceResponse> Infer(
      const std::vector<std::tuple<std::string, Shape, std::vector<int64_t>>>& inputs,
      std::vector<std::string> outputs = {}, DataType dtype = DataType::kInt64) {
    auto answer = std::make_shared<testing::Answer>();
    auto request = std::make_unique<InferenceRequest>("m", -1, testing::Answer::Into(answer));
    auto owned = std::make_shared<std::vector<std::vector<std::byte>>>();
    for (const auto& [name, shape, values] : inputs) {
      if (dtype == DataType::kInt64) {
        owned->push_back(Int64Bytes(values));
      } else {
        std::vector<int32_t> narrow(values.begin(), values.end());
        owned->emplace_back(narrow.size() * 4);
        std::memcpy(owned->back().data(), narrow.data(), owned->back().size());
      }
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      request->inputs.push_back(
          TensorView{std::get<0>(inputs[i]), dtype, std::get<1>(inputs[i]), (*owned)[i]});
    }
    request->keepalive = owned;
    request->requested_outputs = std::move(outputs);
    engine_->Submit(std::move(request));
    return answer->WaitForResult(std::chrono::seconds(30));
  }

  std::unique_ptr<Engine> engine_;
};

TEST_F(EncoderEngineTest, SequenceIndependentOfBatchMatesAndPadding) {
  // Alone, each sequence at its own length.
  const std::vector<int64_t> a = {1, 5, 9, 3};
  const std::vector<int64_t> b = {2, 7, 7, 7, 11, 19, 4, 4, 6, 0, 13, 12, 1, 2, 3, 4};
  auto alone_a = Infer({{"input_ids", {1, 4}, a}});
  auto alone_b = Infer({{"input_ids", {1, 16}, b}});
  ASSERT_TRUE(alone_a.ok()) << alone_a.status();
  ASSERT_TRUE(alone_b.ok()) << alone_b.status();
  // Together in one request: a padded to 16 with a mask.
  std::vector<int64_t> ids = a;
  ids.resize(16, 0);
  ids.insert(ids.end(), b.begin(), b.end());
  std::vector<int64_t> mask(32, 1);
  for (int i = 4; i < 16; ++i) mask[i] = 0;
  auto together = Infer({{"input_ids", {2, 16}, ids}, {"attention_mask", {2, 16}, mask}});
  ASSERT_TRUE(together.ok()) << together.status();
  for (size_t o = 0; o < 3; ++o) {
    const std::vector<float> both = Floats(together->outputs[o]);
    const std::vector<float> one_a = Floats(alone_a->outputs[o]);
    const std::vector<float> one_b = Floats(alone_b->outputs[o]);
    const size_t per_row = both.size() / 2;
    std::vector<float> row_a(both.begin(), both.begin() + static_cast<ptrdiff_t>(per_row));
    std::vector<float> row_b(both.begin() + static_cast<ptrdiff_t>(per_row), both.end());
    if (together->outputs[o].name == "last_hidden_state") {
      // Rows past a's 4 tokens are padding: zeros.
      for (size_t i = 4 * kHidden; i < row_a.size(); ++i) EXPECT_EQ(row_a[i], 0.0f);
      row_a.resize(4 * kHidden);
    }
    EXPECT_LT(RelErr(row_a, one_a), 1e-5) << together->outputs[o].name;
    EXPECT_LT(RelErr(row_b, one_b), 1e-5) << together->outputs[o].name;
  }
  // INT32 gives what INT64 gives.
  auto narrow = Infer({{"input_ids", {1, 4}, a}}, {"embedding"}, DataType::kInt32);
  ASSERT_TRUE(narrow.ok()) << narrow.status();
  EXPECT_EQ(Floats(narrow->outputs[0]), Floats(alone_a->outputs[1]));
  EXPECT_EQ(narrow->outputs[0].shape, (Shape{1, kHidden}));
}

TEST_F(EncoderEngineTest, RequestsOfDifferentLengthsInFlightTogether) {
  // Each alone first, then all submitted at once: the token budget lets them share batches
  // (ragged batching), and each answer must equal its answer alone.
  std::vector<std::vector<int64_t>> sequences;
  std::vector<std::vector<float>> alone;
  for (int length : {1, 3, 16, 7, 12, 2}) {
    std::vector<int64_t> ids(static_cast<size_t>(length));
    for (int i = 0; i < length; ++i) ids[i] = (length * 7 + i * 3) % kVocab;
    auto result = Infer({{"input_ids", {1, length}, ids}}, {"embedding"});
    ASSERT_TRUE(result.ok()) << result.status();
    alone.push_back(Floats(result->outputs[0]));
    sequences.push_back(std::move(ids));
  }
  std::vector<std::shared_ptr<testing::Answer>> answers;
  auto owned = std::make_shared<std::vector<std::vector<std::byte>>>();
  owned->reserve(sequences.size());
  for (const auto& ids : sequences) {
    auto answer = std::make_shared<testing::Answer>();
    auto request = std::make_unique<InferenceRequest>("m", -1, testing::Answer::Into(answer));
    owned->push_back(Int64Bytes(ids));
    request->inputs.push_back(TensorView{
        "input_ids", DataType::kInt64, {1, static_cast<int64_t>(ids.size())}, owned->back()});
    request->keepalive = owned;
    request->requested_outputs = {"embedding"};
    engine_->Submit(std::move(request));
    answers.push_back(answer);
  }
  for (size_t i = 0; i < answers.size(); ++i) {
    auto result = answers[i]->WaitForResult(std::chrono::seconds(30));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_LT(RelErr(Floats(result->outputs[0]), alone[i]), 1e-5) << "sequence " << i;
  }
}

TEST_F(EncoderEngineTest, BadRequestsNameTensorAndLimit) {
  struct Case {
    std::vector<std::tuple<std::string, Shape, std::vector<int64_t>>> inputs;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {{{"input_ids", {1, 2}, {1, 20}}}, {"input_ids", "[0, 20)"}},
      {{{"input_ids", {1, 17}, std::vector<int64_t>(17, 1)}}, {"sequence length 17", "1..16"}},
      {{{"input_ids", {1, 2}, {1, 2}}, {"attention_mask", {1, 2}, {1, 3}}},
       {"attention_mask", "0 and 1"}},
      {{{"input_ids", {1, 2}, {1, 2}}, {"attention_mask", {1, 1}, {1}}},
       {"attention_mask", "[1,1]", "[1,2]"}},
      {{{"input_ids", {1, 2}, {1, 2}}, {"token_type_ids", {1, 2}, {0, 2}}},
       {"token_type_ids", "[0, 2)"}},
      {{{"attention_mask", {1, 2}, {1, 1}}}, {"missing input 'input_ids'"}},
      {{{"input_ids", {9, 1}, std::vector<int64_t>(9, 1)}}, {"max_batch_size"}},
      {{{"input_ids", {1, 2}, {1, 2}}, {"nonsense", {1, 2}, {1, 2}}}, {"no input named"}},
  };
  for (const Case& c : cases) {
    auto result = Infer(c.inputs);
    ASSERT_FALSE(result.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(result.status())) << result.status();
    for (const std::string& needle : c.needles) {
      EXPECT_THAT(result.status().message(), HasSubstr(needle));
    }
  }
  EXPECT_THAT(Infer({{"input_ids", {1, 1}, {1}}}, {"logits"}).status().message(),
              HasSubstr("no output named 'logits'"));
  EXPECT_TRUE(Infer({{"input_ids", {1, 1}, {1}}}).ok());
}

// Text in (issue 20): a version folder with a vocab.txt takes `text` / `text_pair`, tokenized on
// the engine's preparation pool; the token path gives the same answer.
}  // namespace
}  // namespace sluice::engine::models
