// encoder_modernbert.h's forward pass on a tiny random ModernBERT checkpoint written by the test:
// the answer of a sequence is the same bits whatever its batch-mates, the chunking and the compute
// pool (global and sliding-window layers, sequences longer than a query block and than the window,
// an interior run of mask zeros wider than the window). The numerics against transformers are
// tests/integration/encoder_modernbert_test.py.

#include "engine/models/encoder/encoder_modernbert.h"

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

// A random ModernBertModel checkpoint: 3 layers (0 global, 1 and 2 local with window 4 each
// side), every optional bias, 320 positions.
absl::StatusOr<std::shared_ptr<const EncoderNetwork>> LoadCheckpoint() {
  const std::string config =
      R"({"model_type": "modernbert", "hidden_size": 32, "num_hidden_layers": 3,)"
      R"( "num_attention_heads": 4, "intermediate_size": 48, "vocab_size": 50,)"
      R"( "max_position_embeddings": 320, "pad_token_id": 0, "local_attention": 8,)"
      R"( "norm_bias": true, "attention_bias": true, "mlp_bias": true})";
  std::vector<std::pair<std::string, Shape>> specs = {
      {"embeddings.tok_embeddings.weight", {kVocab, kHidden}},
      {"embeddings.norm.weight", {kHidden}},
      {"embeddings.norm.bias", {kHidden}},
      {"final_norm.weight", {kHidden}},
      {"final_norm.bias", {kHidden}}};
  for (int l = 0; l < 3; ++l) {
    const std::string p = absl::StrCat("layers.", l, ".");
    if (l > 0) {
      specs.push_back({p + "attn_norm.weight", {kHidden}});
      specs.push_back({p + "attn_norm.bias", {kHidden}});
    }
    specs.push_back({p + "attn.Wqkv.weight", {3 * kHidden, kHidden}});
    specs.push_back({p + "attn.Wqkv.bias", {3 * kHidden}});
    specs.push_back({p + "attn.Wo.weight", {kHidden, kHidden}});
    specs.push_back({p + "attn.Wo.bias", {kHidden}});
    specs.push_back({p + "mlp_norm.weight", {kHidden}});
    specs.push_back({p + "mlp_norm.bias", {kHidden}});
    specs.push_back({p + "mlp.Wi.weight", {2 * kInter, kHidden}});
    specs.push_back({p + "mlp.Wi.bias", {2 * kInter}});
    specs.push_back({p + "mlp.Wo.weight", {kHidden, kInter}});
    specs.push_back({p + "mlp.Wo.bias", {kHidden}});
  }
  return test_support::LoadRandomCheckpoint("sluice_encoder_modernbert_test", config, specs);
}

// Sequence 1 (if long enough) has a run of 12 mask zeros (wider than the window: those queries
// see no attended key).
bool Masked(size_t s, int i, int n) { return s == 1 && i >= 20 && i < 32 && n > 40; }

TEST(EncoderModernBertTest, ASequencesAnswerIsTheSameBitsWhateverItsBatchChunksAndPool) {
  auto net = LoadCheckpoint();
  ASSERT_TRUE(net.ok()) << net.status();
  ASSERT_TRUE((*net)->layer_plans[1].window == 4 && (*net)->layer_plans[0].window == 0);
  const PackedBatch batch = test_support::RandomBatch({3, 300, 1, 45, 130, 9}, 7, kVocab, Masked);
  test_support::ExpectSameBitsWhateverBatchChunksAndPool(**net, batch);
}

}  // namespace
}  // namespace sluice::engine::models::encoder
