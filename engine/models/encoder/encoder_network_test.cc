// encoder_network.h: config.json of the architectures other than BERT (DistilBERT's own keys dim,
// n_layers...; MPNet's fixed padding index and relative buckets; ModernBERT's layer plans), their
// load errors, and which heads a checkpoint's tensor names make. The numerics against transformers
// are tests/integration/encoder_reference_test.py.

#include "engine/models/encoder/encoder_network.h"

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/wire/float16.h"
#include "engine/models/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::engine::models::encoder {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class EncoderNetworkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           absl::StrCat("sluice_encoder_network_test_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // config.json as given and a weights file holding `names` (F32 zeros of `shapes`).
  std::string Write(const std::string& config, const std::vector<std::string>& names = {},
                    const std::vector<Shape>& shapes = {}) {
    std::ofstream(dir_ / "config.json") << config;
    std::vector<std::vector<float>> data;
    std::vector<TensorView> views;
    data.reserve(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      int64_t n = 1;
      for (int64_t d : shapes[i]) n *= d;
      data.emplace_back(static_cast<size_t>(n), 0.0f);
      views.push_back(TensorView{
          names[i], DataType::kFp32, shapes[i],
          std::span<const std::byte>(reinterpret_cast<const std::byte*>(data.back().data()),
                                     data.back().size() * sizeof(float))});
    }
    EXPECT_TRUE(WriteSafetensorsFile((dir_ / "model.safetensors").string(), views).ok());
    return dir_.string();
  }

  absl::StatusOr<std::shared_ptr<EncoderNetwork>> Describe(
      const std::string& config, const std::vector<std::string>& names = {},
      const std::vector<Shape>& shapes = {}) {
    return ReadEncoderDescription(Write(config, names, shapes), EncoderLoadOptions{});
  }

  fs::path dir_;
};

// A DistilBertConfig as save_pretrained writes it, with `extra` fields appended.
std::string DistilbertConfig(const std::string& extra = "") {
  return absl::StrCat(
      R"({"model_type": "distilbert", "dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 64,)",
      R"( "activation": "gelu", "vocab_size": 100, "max_position_embeddings": 64,)",
      R"( "pad_token_id": 0, "sinusoidal_pos_embds": false)", extra, "}");
}

TEST_F(EncoderNetworkTest, ReadsDistilbertKeys) {
  auto net = Describe(DistilbertConfig(R"(, "activation": "relu", "layer_norm_eps": 1e-5)"));
  ASSERT_TRUE(net.ok()) << net.status();
  EXPECT_EQ((*net)->arch, EncoderArch::kDistilbert);
  EXPECT_EQ((*net)->hidden, 32);
  EXPECT_EQ((*net)->layers, 2);
  EXPECT_EQ((*net)->heads, 4);
  EXPECT_EQ((*net)->intermediate, 64);
  EXPECT_EQ((*net)->activation, HiddenActivation::kRelu);
  // modeling_distilbert.py's LayerNorms are nn.LayerNorm(dim, eps=1e-12), whatever config says.
  EXPECT_EQ((*net)->layer_norm_eps, 1e-12f);
  // No token types (DistilBERT's embeddings have none) and BERT's positions 0..n-1.
  EXPECT_FALSE((*net)->has_token_types());
  EXPECT_FALSE((*net)->positions_after_pad());
  EXPECT_EQ((*net)->max_sequence_length, 64);
  EXPECT_EQ((*net)->classifier, ClassifierKind::kNone);
  EXPECT_FALSE((*net)->has_pooler());
}

TEST_F(EncoderNetworkTest, DistilbertConfigErrorsNameTheirKeys) {
  // BERT's keys are not DistilBERT's: the first missing one is named.
  auto net = Describe(R"({"model_type": "distilbert", "hidden_size": 32, "num_hidden_layers": 2,)"
                      R"( "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 100,)"
                      R"( "max_position_embeddings": 64})");
  ASSERT_FALSE(net.ok());
  EXPECT_THAT(net.status().message(), HasSubstr("has no \"dim\""));
  net = Describe(DistilbertConfig(R"(, "n_heads": 5)"));
  ASSERT_FALSE(net.ok());
  EXPECT_THAT(net.status().message(), HasSubstr("dim 32 is not a multiple of n_heads 5"));
  net = Describe(DistilbertConfig(R"(, "sinusoidal_pos_embds": true)"));
  ASSERT_FALSE(net.ok());
  EXPECT_THAT(net.status().message(), HasSubstr("\"sinusoidal_pos_embds\": true is not supported"));
  net = Describe(DistilbertConfig(R"(, "activation": "swish")"));
  ASSERT_FALSE(net.ok());
  EXPECT_THAT(net.status().message(), HasSubstr("'swish' is not supported"));
  net = Describe(DistilbertConfig(R"(, "model_type": "gpt2")"));
  ASSERT_FALSE(net.ok());
  EXPECT_THAT(net.status().message(),
              HasSubstr("model_type 'gpt2' is not supported by the encoder backend (supported: "
                        "bert, distilbert, modernbert, mpnet, qwen3, roberta, xlm-roberta)"));
}

TEST_F(EncoderNetworkTest, DistilbertClassifierIsPreClassifierAndClassifier) {
  // DistilBertForSequenceClassification's names: "distilbert." before the encoder's, the head's
  // own at the top level; no pooler, which BERT's classifier would need.
  auto net = Describe(DistilbertConfig(R"(, "id2label": {"0": "neg", "1": "pos"})"),
                      {"distilbert.embeddings.word_embeddings.weight", "pre_classifier.weight",
                       "pre_classifier.bias", "classifier.weight", "classifier.bias"},
                      {{100, 32}, {32, 32}, {32}, {2, 32}, {2}});
  ASSERT_TRUE(net.ok()) << net.status();
  EXPECT_EQ((*net)->classifier, ClassifierKind::kDistilbert);
  EXPECT_EQ((*net)->num_labels, 2);
  EXPECT_EQ((*net)->labels, (std::vector<std::string>{"neg", "pos"}));
  // The same names under model_type bert: BERT's head, which refuses to run without a pooler.
  net = Describe(R"({"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 2,)"
                 R"( "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 100,)"
                 R"( "max_position_embeddings": 64})",
                 {"classifier.weight"}, {{2, 32}});
  ASSERT_FALSE(net.ok());
  EXPECT_THAT(net.status().message(), HasSubstr("no pooler"));
}

std::string MpnetConfig(const std::string& extra = "") {
  return absl::StrCat(
      R"({"model_type": "mpnet", "hidden_size": 32, "num_hidden_layers": 2,)",
      R"( "num_attention_heads": 4, "intermediate_size": 64, "hidden_act": "gelu",)",
      R"( "vocab_size": 100, "max_position_embeddings": 66, "layer_norm_eps": 1e-5,)",
      R"( "relative_attention_num_buckets": 32, "pad_token_id": 1)", extra, "}");
}

TEST_F(EncoderNetworkTest, ReadsMpnetConfig) {
  // MPNetEmbeddings' padding index is 1 whatever pad_token_id says; no token types even where
  // config.json names a type_vocab_size.
  auto net = Describe(MpnetConfig(R"(, "pad_token_id": 0, "type_vocab_size": 2)"));
  ASSERT_TRUE(net.ok()) << net.status();
  EXPECT_EQ((*net)->arch, EncoderArch::kMpnet);
  EXPECT_EQ((*net)->pad_token_id, 1);
  EXPECT_TRUE((*net)->positions_after_pad());
  EXPECT_EQ((*net)->position_offset, 2);
  EXPECT_EQ((*net)->max_sequence_length, 64);
  EXPECT_FALSE((*net)->has_token_types());
  EXPECT_EQ((*net)->layer_norm_eps, 1e-5f);
  EXPECT_EQ((*net)->relative_attention_buckets, 32);
  // MPNetForSequenceClassification: RoBERTa's head under "mpnet.".
  net = Describe(MpnetConfig(),
                 {"mpnet.embeddings.word_embeddings.weight", "classifier.dense.weight",
                  "classifier.out_proj.weight"},
                 {{100, 32}, {32, 32}, {3, 32}});
  ASSERT_TRUE(net.ok()) << net.status();
  EXPECT_EQ((*net)->classifier, ClassifierKind::kRoberta);
  EXPECT_EQ((*net)->num_labels, 3);
}

TEST_F(EncoderNetworkTest, MpnetBucketsBelowWhatItsCodeComputesAreRefused) {
  // compute_position_bias always asks for 32 buckets: a smaller table would be indexed past its
  // end.
  auto net = Describe(MpnetConfig(R"(, "relative_attention_num_buckets": 16)"));
  ASSERT_FALSE(net.ok());
  EXPECT_THAT(net.status().message(),
              HasSubstr("relative_attention_num_buckets 16 is under the 32 buckets"));
}

// A ModernBertConfig as save_pretrained writes it (its own keys: hidden_activation, norm_eps,
// local_attention...), with `extra` fields appended.
std::string ModernBertConfig(const std::string& extra = "") {
  return absl::StrCat(
      R"({"model_type": "modernbert", "hidden_size": 32, "num_hidden_layers": 4,)",
      R"( "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 100,)",
      R"( "max_position_embeddings": 8192, "pad_token_id": 0, "local_attention": 16)", extra, "}");
}

TEST_F(EncoderNetworkTest, ModernBertLayersAreDescribedAsData) {
  auto net = Describe(ModernBertConfig(R"(, "global_attn_every_n_layers": 2, "norm_eps": 1e-6,)"
                                       R"( "id2label": {"0": "irrelevant", "1": "relevant"})"),
                      {"classifier.weight", "classifier.bias"}, {{2, 32}, {2}});
  ASSERT_TRUE(net.ok()) << net.status();
  const EncoderNetwork& n = **net;
  EXPECT_EQ(n.arch, EncoderArch::kModernbert);
  EXPECT_FLOAT_EQ(n.layer_norm_eps, 1e-6f);
  EXPECT_EQ(n.max_sequence_length, 8192);
  EXPECT_FALSE(n.has_token_types());
  // ModernBertConfig's defaults: no biases, GELU (erf), thetas 160,000 (global) and 10,000.
  EXPECT_FALSE(n.attention_biases);
  EXPECT_FALSE(n.mlp_biases);
  EXPECT_FALSE(n.norm_biases);
  EXPECT_EQ(n.activation, HiddenActivation::kGeluErf);
  ASSERT_EQ(n.rope_tables.size(), 2u);
  EXPECT_EQ(n.rope_tables[0].theta, 160000.0);
  EXPECT_EQ(n.rope_tables[1].theta, 10000.0);
  ASSERT_EQ(n.layer_plans.size(), 4u);
  for (int l = 0; l < 4; ++l) {
    const LayerPlan& plan = n.layer_plans[static_cast<size_t>(l)];
    EXPECT_TRUE(plan.pre_norm);
    EXPECT_TRUE(plan.gated_mlp);
    EXPECT_EQ(plan.attention_norm, l != 0) << l;
    EXPECT_EQ(plan.window, l % 2 == 0 ? 0 : 8) << l;
    EXPECT_EQ(plan.rope_table, l % 2 == 0 ? 0 : 1) << l;
  }
  EXPECT_EQ(n.classifier, ClassifierKind::kModernbert);
  EXPECT_EQ(n.labels, (std::vector<std::string>{"irrelevant", "relevant"}));
  EXPECT_FALSE(n.classifier_mean_pooling);
}

TEST_F(EncoderNetworkTest, ModernBertConfigErrorsNameTheirFields) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"(, "hidden_activation": "swish")", "\"hidden_activation\": hidden_act 'swish'"},
      {R"(, "classifier_pooling": "max")", "\"classifier_pooling\" 'max' is not supported"},
      {R"(, "local_attention": 0)", "\"local_attention\" must be an integer"},
      {R"(, "global_rope_theta": -1)", "\"global_rope_theta\" must be a positive number"},
      {R"(, "norm_eps": 0)", "\"norm_eps\" must be a number in (0, 1]"},
      {R"(, "norm_bias": "yes")", "\"norm_bias\" is not a boolean"},
  };
  for (const auto& [extra, needle] : cases) {
    auto net = Describe(ModernBertConfig(extra));
    ASSERT_FALSE(net.ok()) << extra;
    EXPECT_THAT(net.status().message(), HasSubstr(needle)) << extra;
  }
}

TEST_F(EncoderNetworkTest, ModernBertMissingTensorIsNamed) {
  const std::string folder =
      Write(ModernBertConfig(), {"embeddings.tok_embeddings.weight", "embeddings.norm.weight"},
            {{100, 32}, {32}});
  auto net = LoadEncoderNetwork(folder, EncoderLoadOptions{});
  ASSERT_FALSE(net.ok());
  EXPECT_THAT(net.status().message(), HasSubstr("no tensor 'layers.0.attn.Wqkv.weight'"));
  EXPECT_THAT(net.status().message(), HasSubstr("[96,32]"));
}

// A Qwen3Config as save_pretrained writes it (Qwen3-Embedding's shape, scaled down: 4 query heads
// on 2 key/value heads, head_dim 16 where hidden / heads is 8), with `extra` fields appended.
std::string Qwen3Config(const std::string& extra = "") {
  return absl::StrCat(
      R"({"model_type": "qwen3", "hidden_size": 32, "num_hidden_layers": 2,)",
      R"( "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,)",
      R"( "intermediate_size": 64, "vocab_size": 100, "max_position_embeddings": 512,)",
      R"( "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,)",
      R"( "rope_scaling": null, "use_sliding_window": false, "attention_bias": false,)",
      R"( "layer_types": ["full_attention", "full_attention"])", extra, "}");
}

TEST_F(EncoderNetworkTest, Qwen3LayersAreDescribedAsData) {
  auto net = Describe(Qwen3Config());
  ASSERT_TRUE(net.ok()) << net.status();
  const EncoderNetwork& n = **net;
  EXPECT_EQ(n.arch, EncoderArch::kQwen3);
  EXPECT_EQ(n.head_size(), 16);  // head_dim, not hidden / heads
  EXPECT_EQ(n.key_value_heads(), 2);
  EXPECT_EQ(n.qkv_width(), (4 + 2 * 2) * 16);
  EXPECT_EQ(n.context_width(), 64);
  EXPECT_FLOAT_EQ(n.layer_norm_eps, 1e-6f);
  EXPECT_EQ(n.activation, HiddenActivation::kSilu);
  EXPECT_EQ(n.max_sequence_length, 512);
  EXPECT_FALSE(n.has_token_types());
  EXPECT_FALSE(n.attention_biases);
  ASSERT_EQ(n.rope_tables.size(), 1u);
  EXPECT_EQ(n.rope_tables[0].theta, 1e6);
  for (const LayerPlan& plan : n.layer_plans) {
    EXPECT_TRUE(plan.pre_norm && plan.rms_norm && plan.causal && plan.qk_norm && plan.gated_mlp);
    EXPECT_EQ(plan.rope_table, 0);
    EXPECT_EQ(plan.window, 0);
  }
  // No 1_Pooling: a decoder's summary, the last token.
  EXPECT_TRUE(n.pooling.lasttoken);
  EXPECT_EQ(n.pooling.count(), 1);
}

TEST_F(EncoderNetworkTest, Qwen3ScoreHeadIsDescribed) {
  // Qwen3ForSequenceClassification: "model." + the decoder, score.weight [labels, H] beside it.
  auto net = Describe(Qwen3Config(R"(, "pad_token_id": 7)"),
                      {"model.embed_tokens.weight", "score.weight"}, {{100, 32}, {2, 32}});
  ASSERT_TRUE(net.ok()) << net.status();
  EXPECT_EQ((*net)->classifier, ClassifierKind::kQwen3Score);
  EXPECT_EQ((*net)->num_labels, 2);
  EXPECT_EQ((*net)->score_pad_token_id, 7);
  auto no_pad = Describe(Qwen3Config());
  ASSERT_TRUE(no_pad.ok()) << no_pad.status();
  EXPECT_EQ((*no_pad)->score_pad_token_id, -1);
  EXPECT_EQ((*no_pad)->classifier, ClassifierKind::kNone);
}

TEST_F(EncoderNetworkTest, Qwen3ConfigErrorsNameTheirFields) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"(, "hidden_act": "gelu")", "\"hidden_act\": 'gelu' is not supported"},
      {R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0})",
       "\"rope_scaling\" 'yarn' is not supported"},
      {R"(, "rope_scaling": {"type": "linear", "factor": 2.0})",
       "\"rope_scaling\" 'linear' is not supported"},
      {R"(, "use_sliding_window": true)", "\"use_sliding_window\" true is not supported"},
      {R"(, "num_key_value_heads": 3)", "\"num_key_value_heads\" 3 does not divide"},
      {R"(, "head_dim": 15)", "\"head_dim\" 15 is odd"},
      {R"(, "layer_types": ["sliding_attention"])", "\"layer_types\" entry \"sliding_attention\""},
      {R"(, "rope_theta": 0)", "\"rope_theta\" must be a positive number"},
  };
  for (const auto& [extra, needle] : cases) {
    // json keeps the last of duplicate keys: `extra` overrides the defaults above.
    auto net = Describe(Qwen3Config(extra));
    ASSERT_FALSE(net.ok()) << extra;
    EXPECT_THAT(net.status().message(), HasSubstr(needle)) << extra;
  }
}

TEST_F(EncoderNetworkTest, Qwen3MissingTensorIsNamed) {
  const std::string folder = Write(Qwen3Config(), {"model.embed_tokens.weight"}, {{100, 32}});
  auto net = LoadEncoderNetwork(folder, EncoderLoadOptions{});
  ASSERT_FALSE(net.ok());
  EXPECT_THAT(net.status().message(), HasSubstr("layers.0.input_layernorm.weight"));
  EXPECT_THAT(net.status().message(), HasSubstr("[32]"));
}

// A model's precision bf16 or int8 holds its word embeddings in BF16 (so that an int8 BERT-base
// takes 0.33x its FP32 memory, not 0.43x); fp32 leaves the table as the checkpoint gave it.
TEST(EmbeddingTableTest, InPrecisionHoldsTheTableInBf16ForBf16AndInt8) {
  const int64_t rows = 50;
  const int cols = 33;
  std::vector<float> values(static_cast<size_t>(rows * cols));
  uint32_t state = 7;
  for (float& v : values) {
    state = state * 1664525u + 1013904223u;
    v = (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 0.1f;
  }
  const EmbeddingTable fp32 = EmbeddingTable::Hold(values, rows, cols);
  ASSERT_EQ(fp32.format(), WeightFormat::kFp32);
  const EmbeddingTable kept = EmbeddingTable::InPrecision(fp32, WeightFormat::kFp32);
  EXPECT_EQ(kept.format(), WeightFormat::kFp32);
  EXPECT_EQ(kept.Widened(), values);
  for (WeightFormat format :
       {WeightFormat::kBf16, WeightFormat::kFp32HeldBf16, WeightFormat::kInt8}) {
    const EmbeddingTable held = EmbeddingTable::InPrecision(fp32, format);
    EXPECT_EQ(held.format(), WeightFormat::kFp32HeldBf16);
    EXPECT_EQ(held.bytes(), rows * cols * 2);
    const std::vector<float> got = held.Widened();
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(got[i], Bf16ToFloat(RoundToBf16(values[i]))) << i;
    }
    // Already BF16: kept as it is.
    EXPECT_EQ(EmbeddingTable::InPrecision(held, format).Widened(), got);
  }
  // An FP16 checkpoint's table in bf16: rounded from its FP16 values.
  std::vector<float> halves = values;
  for (float& v : halves) v = wire::HalfToFloat(wire::FloatToHalf(v));
  const EmbeddingTable fp16 = EmbeddingTable::Hold(halves, rows, cols);
  ASSERT_EQ(fp16.format(), WeightFormat::kFp32HeldFp16);
  const std::vector<float> from_fp16 =
      EmbeddingTable::InPrecision(fp16, WeightFormat::kBf16).Widened();
  for (size_t i = 0; i < halves.size(); ++i) {
    ASSERT_EQ(from_fp16[i], Bf16ToFloat(RoundToBf16(halves[i]))) << i;
  }
}

}  // namespace
}  // namespace sluice::engine::models::encoder
