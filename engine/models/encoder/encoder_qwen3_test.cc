// encoder_qwen3.h's forward pass on a tiny random Qwen3 checkpoint written by the test: the answer
// of a sequence is the same bits whatever its batch-mates, the chunking and the compute pool
// (grouped-query attention 4:2 with head_dim 16 != hidden / heads, q/k/v/o biases, sequences
// longer than a query block, leading mask zeros: queries that see no attended key, and an
// interior run). The numerics against transformers are tests/integration/encoder_qwen3_test.py.

#include "engine/models/encoder/encoder_qwen3.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/models/encoder/encoder_forward.h"
#include "engine/models/encoder/encoder_forward_test_support.h"
#include "gtest/gtest.h"

namespace sluice::engine::models::encoder {
namespace {

constexpr int kHidden = 32;
constexpr int kInter = 48;
constexpr int kVocab = 50;

// A random Qwen3Model checkpoint with the "model." prefix of Qwen3ForCausalLM: 2 layers, 4 query
// heads on 2 key/value heads of 16, attention biases, 320 positions.
absl::StatusOr<std::shared_ptr<const EncoderNetwork>> LoadCheckpoint() {
  constexpr int kHeadDim = 16;
  const std::string config =
      R"({"model_type": "qwen3", "hidden_size": 32, "num_hidden_layers": 2,)"
      R"( "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,)"
      R"( "intermediate_size": 48, "vocab_size": 50, "max_position_embeddings": 320,)"
      R"( "rope_theta": 1000000.0, "attention_bias": true, "rms_norm_eps": 1e-6})";
  std::vector<std::pair<std::string, Shape>> specs = {
      {"model.embed_tokens.weight", {kVocab, kHidden}},
      {"model.norm.weight", {kHidden}},
      {"lm_head.weight", {kVocab, kHidden}}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    specs.push_back({p + "input_layernorm.weight", {kHidden}});
    specs.push_back({p + "self_attn.q_proj.weight", {4 * kHeadDim, kHidden}});
    specs.push_back({p + "self_attn.q_proj.bias", {4 * kHeadDim}});
    for (const char* kv : {"self_attn.k_proj", "self_attn.v_proj"}) {
      specs.push_back({p + kv + ".weight", {2 * kHeadDim, kHidden}});
      specs.push_back({p + kv + ".bias", {2 * kHeadDim}});
    }
    specs.push_back({p + "self_attn.o_proj.weight", {kHidden, 4 * kHeadDim}});
    specs.push_back({p + "self_attn.o_proj.bias", {kHidden}});
    specs.push_back({p + "self_attn.q_norm.weight", {kHeadDim}});
    specs.push_back({p + "self_attn.k_norm.weight", {kHeadDim}});
    specs.push_back({p + "post_attention_layernorm.weight", {kHidden}});
    specs.push_back({p + "mlp.gate_proj.weight", {kInter, kHidden}});
    specs.push_back({p + "mlp.up_proj.weight", {kInter, kHidden}});
    specs.push_back({p + "mlp.down_proj.weight", {kHidden, kInter}});
  }
  return test_support::LoadRandomCheckpoint("sluice_encoder_qwen3_test", config, specs);
}

// Sequence 1 (if long enough) has a run of 12 mask zeros, sequence 3 (if long enough) 5 leading
// ones (its first queries see no attended key).
bool Masked(size_t s, int i, int n) {
  const bool interior = s == 1 && i >= 20 && i < 32 && n > 40;
  const bool leading = s == 3 && i < 5 && n > 10;
  return interior || leading;
}

TEST(EncoderQwen3Test, ASequencesAnswerIsTheSameBitsWhateverItsBatchChunksAndPool) {
  auto net = LoadCheckpoint();
  ASSERT_TRUE(net.ok()) << net.status();
  ASSERT_TRUE((*net)->layer_plans[0].causal && (*net)->key_value_heads() == 2);
  const PackedBatch batch = test_support::RandomBatch({3, 300, 1, 45, 130, 9}, 7, kVocab, Masked);
  test_support::ExpectSameBitsWhateverBatchChunksAndPool(**net, batch);
}

}  // namespace
}  // namespace sluice::engine::models::encoder
