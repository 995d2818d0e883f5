#pragma once

// What the pre-norm forward passes' tests share (encoder_modernbert_test.cc,
// encoder_qwen3_test.cc): a random FP32 checkpoint written from a list of tensor names and loaded,
// a random packed batch with the test's mask zeros, and the check that a sequence's answer is the
// same bits whatever its batch-mates, the chunking and the compute pool.

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/core/compute_pool.h"
#include "engine/core/tensor.h"
#include "engine/models/encoder/encoder_forward.h"
#include "engine/models/encoder/encoder_network.h"
#include "engine/models/safetensors.h"
#include "gtest/gtest.h"

namespace sluice::engine::models::encoder::test_support {

// Writes `config_json` as dir/config.json and dir/model.safetensors with one FP32 tensor per
// (name, shape) of `tensors`, in that order, each value drawn from N(0, 0.3^2) (seed 31) plus 1 for
// a norm's weight (names containing "norm.weight"), so that norms scale by about 1. Returns `dir`.
inline std::string WriteRandomCheckpoint(
    const std::filesystem::path& dir, const std::string& config_json,
    const std::vector<std::pair<std::string, Shape>>& tensors) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << config_json;
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<std::vector<float>> data;
  data.reserve(tensors.size());  // the views point into these vectors: no reallocation
  std::vector<TensorView> views;
  for (const auto& [name, shape] : tensors) {
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

// The network of WriteRandomCheckpoint(config_json, tensors), written into a fresh temporary folder
// named after `name` and this process, and loaded with the default options; the folder is removed.
inline absl::StatusOr<std::shared_ptr<const EncoderNetwork>> LoadRandomCheckpoint(
    const std::string& name, const std::string& config_json,
    const std::vector<std::pair<std::string, Shape>>& tensors) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat(name, "_", ::getpid());
  std::filesystem::remove_all(dir);
  auto net =
      LoadEncoderNetwork(WriteRandomCheckpoint(dir, config_json, tensors), EncoderLoadOptions{});
  std::filesystem::remove_all(dir);
  return net;
}

// Sequences of `lengths` with token ids drawn below `vocab` (seed `seed`), positions from 0, and
// attention-mask zeros where masked(sequence, position, length).
inline PackedBatch RandomBatch(const std::vector<int>& lengths, uint32_t seed, int vocab,
                               absl::FunctionRef<bool(size_t s, int i, int n)> masked) {
  PackedBatch batch;
  std::mt19937 rng(seed);
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int n = lengths[s];
    for (int i = 0; i < n; ++i) {
      batch.token_ids.push_back(static_cast<int32_t>(rng() % vocab));
      batch.token_types.push_back(0);
      batch.positions.push_back(i);
      batch.attend.push_back(masked(s, i, n) ? 0 : 1);
    }
    batch.offsets.push_back(batch.offsets.back() + n);
  }
  return batch;
}

// Sequence `s` of `batch` as a batch of its own.
inline PackedBatch SequenceAlone(const PackedBatch& batch, int s) {
  PackedBatch alone;
  const int64_t begin = batch.offsets[s];
  const int64_t end = batch.offsets[s + 1];
  alone.token_ids.assign(batch.token_ids.begin() + begin, batch.token_ids.begin() + end);
  alone.token_types.assign(batch.token_types.begin() + begin, batch.token_types.begin() + end);
  alone.positions.assign(batch.positions.begin() + begin, batch.positions.begin() + end);
  alone.attend.assign(batch.attend.begin() + begin, batch.attend.begin() + end);
  alone.offsets.push_back(end - begin);
  return alone;
}

// The hidden states of `batch` forwarded serially in one chunk are finite, and bit-identical to
// each sequence forwarded alone and to the whole batch in chunks of 16, 256 and all tokens on
// pools of 1, 2 and 3 threads. Stops at the first difference (a fatal failure of the caller's
// test: check HasFatalFailure() after it where more follows).
inline void ExpectSameBitsWhateverBatchChunksAndPool(const EncoderNetwork& net,
                                                     const PackedBatch& batch) {
  const int64_t hidden = net.hidden;
  EncoderWorkspace serial;
  Forward(net, batch, serial, std::numeric_limits<int64_t>::max());
  const std::vector<float> expected(serial.hidden(), serial.hidden() + batch.tokens() * hidden);
  for (float v : expected) ASSERT_TRUE(std::isfinite(v));
  for (int s = 0; s < batch.sequences(); ++s) {
    const int64_t begin = batch.offsets[s];
    const int64_t end = batch.offsets[s + 1];
    EncoderWorkspace ws;
    Forward(net, SequenceAlone(batch, s), ws);
    for (int64_t i = 0; i < (end - begin) * hidden; ++i) {
      ASSERT_EQ(ws.hidden()[i], expected[static_cast<size_t>(begin * hidden + i)])
          << "sequence " << s << " token " << i / hidden;
    }
  }
  EncoderWorkspace ws;
  for (int threads : {1, 2, 3}) {
    ComputePool pool(threads);
    for (int64_t chunk : {int64_t{16}, int64_t{256}, std::numeric_limits<int64_t>::max()}) {
      Forward(net, batch, ws, chunk, &pool);
      for (int64_t i = 0; i < batch.tokens() * hidden; ++i) {
        ASSERT_EQ(ws.hidden()[i], expected[static_cast<size_t>(i)])
            << threads << " threads, chunks of " << chunk << ": token " << i / hidden;
      }
    }
  }
}

}  // namespace sluice::engine::models::encoder::test_support
