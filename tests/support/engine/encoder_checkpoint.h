#pragma once

// The encoder model tests' tiny BERT checkpoints (HF names and layout, written to a temporary
// folder) and the fixture that writes and loads them: shared by encoder_model_test.cc and
// encoder_text_model_test.cc.

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
#include "common/wire/float16.h"
#include "engine/core/backend.h"
#include "engine/engine.h"
#include "engine/models/encoder/encoder_forward.h"
#include "engine/models/encoder/encoder_model.h"
#include "engine/models/encoder/encoder_network.h"
#include "engine/models/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/engine/answer.h"

namespace sluice::engine::models::test_support {

namespace fs = std::filesystem;

inline constexpr int kHidden = 8;
inline constexpr int kInter = 16;
inline constexpr int kVocab = 20;
inline constexpr int kPositions = 16;

struct Checkpoint {
  std::map<std::string, std::pair<Shape, std::vector<float>>> tensors;
  std::string model_type = "bert";
  std::string hidden_act = "gelu";
  int type_vocab = 2;
  int pad = 0;
};

inline Checkpoint TinyBert(uint32_t seed = 1) {
  Checkpoint ck;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  auto add = [&](const std::string& name, Shape shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> values(static_cast<size_t>(n));
    for (float& v : values) v = normal(rng);
    if (name.find("LayerNorm.weight") != std::string::npos) {
      for (float& v : values) v += 1.0f;
    }
    ck.tensors[name] = {shape, values};
  };
  add("embeddings.word_embeddings.weight", {kVocab, kHidden});
  add("embeddings.position_embeddings.weight", {kPositions, kHidden});
  add("embeddings.token_type_embeddings.weight", {2, kHidden});
  add("embeddings.LayerNorm.weight", {kHidden});
  add("embeddings.LayerNorm.bias", {kHidden});
  for (int l = 0; l < 2; ++l) {
    const std::string p = absl::StrCat("encoder.layer.", l, ".");
    for (const char* part : {"query", "key", "value"}) {
      add(absl::StrCat(p, "attention.self.", part, ".weight"), {kHidden, kHidden});
      add(absl::StrCat(p, "attention.self.", part, ".bias"), {kHidden});
    }
    add(p + "attention.output.dense.weight", {kHidden, kHidden});
    add(p + "attention.output.dense.bias", {kHidden});
    add(p + "attention.output.LayerNorm.weight", {kHidden});
    add(p + "attention.output.LayerNorm.bias", {kHidden});
    add(p + "intermediate.dense.weight", {kInter, kHidden});
    add(p + "intermediate.dense.bias", {kInter});
    add(p + "output.dense.weight", {kHidden, kInter});
    add(p + "output.dense.bias", {kHidden});
    add(p + "output.LayerNorm.weight", {kHidden});
    add(p + "output.LayerNorm.bias", {kHidden});
  }
  add("pooler.dense.weight", {kHidden, kHidden});
  add("pooler.dense.bias", {kHidden});
  return ck;
}

class EncoderModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           absl::StrCat("sluice_encoder_test_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the checkpoint into a fresh version folder, its tensors in `dtype` (kFp32, or kBf16 /
  // kFp16: each value rounded to nearest even); returns its path.
  std::string Write(const Checkpoint& ck, const std::string& name = "m",
                    DataType dtype = DataType::kFp32) {
    const fs::path folder = dir_ / name / "1";
    fs::create_directories(folder);
    std::ofstream(folder / "config.json")
        << "{\"model_type\": \"" << ck.model_type << "\", \"hidden_size\": " << kHidden
        << ", \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"intermediate_size\": "
        << kInter << ", \"hidden_act\": \"" << ck.hidden_act << "\", \"vocab_size\": " << kVocab
        << ", \"max_position_embeddings\": " << kPositions
        << ", \"type_vocab_size\": " << ck.type_vocab << ", \"pad_token_id\": " << ck.pad
        << ", \"layer_norm_eps\": 1e-12}";
    std::vector<TensorView> views;
    std::vector<std::vector<uint16_t>> narrowed;  // kBf16 / kFp16 tensors' bits
    narrowed.reserve(ck.tensors.size());
    for (const auto& [tensor_name, entry] : ck.tensors) {
      if (dtype == DataType::kFp32) {
        views.push_back(TensorView{
            tensor_name, DataType::kFp32, entry.first,
            std::span<const std::byte>(reinterpret_cast<const std::byte*>(entry.second.data()),
                                       entry.second.size() * sizeof(float))});
        continue;
      }
      std::vector<uint16_t>& bits = narrowed.emplace_back();
      for (float v : entry.second) {
        bits.push_back(dtype == DataType::kBf16 ? wire::FloatToBFloat16(v) : wire::FloatToHalf(v));
      }
      views.push_back(
          TensorView{tensor_name, dtype, entry.first,
                     std::span<const std::byte>(reinterpret_cast<const std::byte*>(bits.data()),
                                                bits.size() * sizeof(uint16_t))});
    }
    EXPECT_TRUE(WriteSafetensorsFile((folder / "model.safetensors").string(), views).ok());
    return folder.string();
  }

  ModelSpec Spec(const std::string& folder, ModelConfig config = {}) {
    if (config.name.empty()) config.name = "m";
    config.backend = "encoder";
    if (config.max_batch_size == 0) config.max_batch_size = 8;
    ModelSpec spec;
    spec.config = config;
    spec.version_path = folder;
    return spec;
  }

  fs::path dir_;
};

inline std::vector<std::byte> Int64Bytes(const std::vector<int64_t>& values) {
  std::vector<std::byte> bytes(values.size() * 8);
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

inline std::vector<float> Floats(const Tensor& tensor) {
  std::vector<float> out(tensor.data.size() / sizeof(float));
  std::memcpy(out.data(), tensor.data.data(), tensor.data.size());
  return out;
}

inline double RelErr(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0;
  double scale = 1e-12;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff = std::max(diff, std::abs(double{got[i]} - want[i]));
    scale = std::max(scale, std::abs(double{want[i]}));
  }
  return diff / scale;
}

// One request's inputs, owned.
struct Input {
  std::vector<std::vector<std::byte>> bytes;
  std::vector<TensorView> views;
  void Add(const std::string& name, Shape shape, const std::vector<int64_t>& values) {
    bytes.push_back(Int64Bytes(values));
    views.push_back(TensorView{name, DataType::kInt64, shape, bytes.back()});
  }
};

}  // namespace sluice::engine::models::test_support
