// encoder_modernbert.h's forward pass on a tiny random ModernBERT checkpoint written by the test:
// the answer of a sequence is the same bits whatever its batch-mates, the chunking and the compute
// pool (global and sliding-window layers, sequences longer than a query block and than the window,
// an interior run of mask zeros wider than the window). The numerics against transformers are
// tests/integration/encoder_modernbert_test.py.

#include "engine/models/encoder/encoder_modernbert.h"

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

// A random ModernBertModel checkpoint: 3 layers (0 global, 1 and 2 local with window 4 each
// side), every optional bias, 320 positions.
std::string WriteCheckpoint(const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json")
      << R"({"model_type": "modernbert", "hidden_size": 32, "num_hidden_layers": 3,)"
      << R"( "num_attention_heads": 4, "intermediate_size": 48, "vocab_size": 50,)"
      << R"( "max_position_embeddings": 320, "pad_token_id": 0, "local_attention": 8,)"
      << R"( "norm_bias": true, "attention_bias": true, "mlp_bias": true})";
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
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<std::vector<float>> data;
  data.reserve(specs.size());
  std::vector<TensorView> views;
  for (const auto& [name, shape] : specs) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    data.emplace_back(static_cast<size_t>(n));
    const bool gamma = name.find("norm.weight") != std::string::npos;
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
// zeros (wider than the window: those queries see no attended key).
PackedBatch MakeBatch(const std::vector<int>& lengths, uint32_t seed) {
  PackedBatch batch;
  std::mt19937 rng(seed);
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int n = lengths[s];
    for (int i = 0; i < n; ++i) {
      batch.token_ids.push_back(static_cast<int32_t>(rng() % kVocab));
      batch.token_types.push_back(0);
      batch.positions.push_back(i);
      batch.attend.push_back(s == 1 && i >= 20 && i < 32 && n > 40 ? 0 : 1);
    }
    batch.offsets.push_back(batch.offsets.back() + n);
  }
  return batch;
}

TEST(EncoderModernBertTest, ASequencesAnswerIsTheSameBitsWhateverItsBatchChunksAndPool) {
  const fs::path dir =
      fs::temp_directory_path() / absl::StrCat("sluice_encoder_modernbert_test_", ::getpid());
  fs::remove_all(dir);
  auto net = LoadEncoderNetwork(WriteCheckpoint(dir), EncoderLoadOptions{});
  fs::remove_all(dir);
  ASSERT_TRUE(net.ok()) << net.status();
  ASSERT_TRUE((*net)->layer_plans[1].window == 4 && (*net)->layer_plans[0].window == 0);
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
