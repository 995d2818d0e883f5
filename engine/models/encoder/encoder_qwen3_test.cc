// encoder_qwen3.h's forward pass on a tiny random Qwen3 checkpoint written by the test: the answer
// of a sequence is the same bits whatever its batch-mates, the chunking and the compute pool
// (grouped-query attention 4:2 with head_dim 16 != hidden / heads, q/k/v/o biases, sequences
// longer than a query block, leading mask zeros: queries that see no attended key, and an
// interior run). The numerics against transformers are tests/integration/encoder_qwen3_test.py.

#include "engine/models/encoder/encoder_qwen3.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/compute_pool.h"
#include "engine/models/encoder/encoder_forward.h"
#include "engine/models/safetensors.h"
#include "gtest/gtest.h"

namespace sluice::engine::models::encoder {
namespace {

namespace fs = std::filesystem;

constexpr int kHidden = 32;
constexpr int kInter = 48;
constexpr int kVocab = 50;

// A random Qwen3Model checkpoint with the "model." prefix of Qwen3ForCausalLM: 2 layers, 4 query
// heads on 2 key/value heads of 16, attention biases, 320 positions.
std::string WriteCheckpoint(const fs::path& dir) {
  constexpr int kHeadDim = 16;
  fs::create_directories(dir);
  std::ofstream(dir / "config.json")
      << R"({"model_type": "qwen3", "hidden_size": 32, "num_hidden_layers": 2,)"
      << R"( "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,)"
      << R"( "intermediate_size": 48, "vocab_size": 50, "max_position_embeddings": 320,)"
      << R"( "rope_theta": 1000000.0, "attention_bias": true, "rms_norm_eps": 1e-6})";
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
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<std::vector<float>> data;
  data.reserve(specs.size());
  std::vector<TensorView> views;
  for (const auto& [name, shape] : specs) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    data.emplace_back(static_cast<size_t>(n));
    const bool gamma = name.find("norm.weight") != std::string::npos;  // RMSNorm weights near 1
    for (float& v : data.back()) v = (gamma ? 1.0f : 0.0f) + normal(rng);
    views.push_back(TensorView{
        name, DataType::kFp32, shape,
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(data.back().data()),
                                   data.back().size() * sizeof(float))});
  }
  EXPECT_TRUE(WriteSafetensorsFile((dir / "model.safetensors").string(), views).ok());
  return dir.string();
}

// Sequences of `lengths`, positions from 0; sequence 1 (if long enough) has a run of 12 mask
// zeros, sequence 3 (if long enough) 5 leading ones (its first queries see no attended key).
PackedBatch MakeBatch(const std::vector<int>& lengths, uint32_t seed) {
  PackedBatch batch;
  std::mt19937 rng(seed);
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int n = lengths[s];
    for (int i = 0; i < n; ++i) {
      batch.token_ids.push_back(static_cast<int32_t>(rng() % kVocab));
      batch.token_types.push_back(0);
      batch.positions.push_back(i);
      const bool interior = s == 1 && i >= 20 && i < 32 && n > 40;
      const bool leading = s == 3 && i < 5 && n > 10;
      batch.attend.push_back(interior || leading ? 0 : 1);
    }
    batch.offsets.push_back(batch.offsets.back() + n);
  }
  return batch;
}

TEST(EncoderQwen3Test, ASequencesAnswerIsTheSameBitsWhateverItsBatchChunksAndPool) {
  const fs::path dir =
      fs::temp_directory_path() / absl::StrCat("sluice_encoder_qwen3_test_", ::getpid());
  fs::remove_all(dir);
  auto net = LoadEncoderNetwork(WriteCheckpoint(dir), EncoderLoadOptions{});
  fs::remove_all(dir);
  ASSERT_TRUE(net.ok()) << net.status();
  ASSERT_TRUE((*net)->layer_plans[0].causal && (*net)->key_value_heads() == 2);
  const std::vector<int> lengths = {3, 300, 1, 45, 130, 9};
  const PackedBatch batch = MakeBatch(lengths, 7);
  EncoderWorkspace serial;
  Forward(**net, batch, serial, std::numeric_limits<int64_t>::max());
  const std::vector<float> expected(serial.hidden(), serial.hidden() + batch.tokens() * kHidden);
  for (float v : expected) ASSERT_TRUE(std::isfinite(v));
  // Each sequence alone.
  for (size_t s = 0; s < lengths.size(); ++s) {
    PackedBatch alone;
    const int64_t begin = batch.offsets[s];
    const int64_t end = batch.offsets[s + 1];
    alone.token_ids.assign(batch.token_ids.begin() + begin, batch.token_ids.begin() + end);
    alone.token_types.assign(batch.token_types.begin() + begin, batch.token_types.begin() + end);
    alone.positions.assign(batch.positions.begin() + begin, batch.positions.begin() + end);
    alone.attend.assign(batch.attend.begin() + begin, batch.attend.begin() + end);
    alone.offsets.push_back(end - begin);
    EncoderWorkspace ws;
    Forward(**net, alone, ws);
    for (int64_t i = 0; i < (end - begin) * kHidden; ++i) {
      ASSERT_EQ(ws.hidden()[i], expected[static_cast<size_t>(begin * kHidden + i)])
          << "sequence " << s << " token " << i / kHidden;
    }
  }
  // Chunks and pools.
  EncoderWorkspace ws;
  for (int threads : {1, 2, 3}) {
    ComputePool pool(threads);
    for (int64_t chunk : {int64_t{16}, int64_t{256}, std::numeric_limits<int64_t>::max()}) {
      Forward(**net, batch, ws, chunk, &pool);
      for (int64_t i = 0; i < batch.tokens() * kHidden; ++i) {
        ASSERT_EQ(ws.hidden()[i], expected[static_cast<size_t>(i)])
            << threads << " threads, chunks of " << chunk << ": token " << i / kHidden;
      }
    }
  }
}

}  // namespace
}  // namespace sluice::engine::models::encoder
