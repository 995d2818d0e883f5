// GPU tests of the encoder's behaviour (CTest label `gpu`; binary gpu_cuda_encoder_test with
// cuda_encoder_test.cc): CUDA graph replay against plain launches bit for bit; a sequence's
// answer independent of its batch-mates; the device's token and sequence counters against what
// was sent; a lone request above the largest bucket; the bundled `embedder` (text in, tokenized by
// the engine) on the GPU against the CPU. Each test skips with the reason where no GPU is usable
// and fails instead under SLUICE_GPU_TESTS_REQUIRED=1.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/wire/float16.h"
#include "engine/cuda/cuda_executor.h"
#include "engine/cuda/cuda_model.h"
#include "engine/engine.h"
#include "engine/models/encoder/encoder_model.h"
#include "engine/models/safetensors.h"
#include "gtest/gtest.h"
#include "tests/gpu/cuda_encoder_test_support.h"
#include "tests/gpu/gpu_required.h"
#include "tests/support/engine/answer.h"

namespace sluice::engine::cuda {
namespace {

using namespace encoder_testing;  // NOLINT: the tests' shared vocabulary
using ::sluice::engine::testing::Answer;

TEST_F(GpuEncoderTest, GraphReplayEqualsPlainLaunchesBitForBit) {
  const Arch arch{.label = "bert", .labels = 3, .normalize = true};
  for (DataType dtype : {DataType::kFp16, DataType::kFp32}) {
    TempDir dir;
    WriteCheckpoint(dir.version_path(), arch, dtype, 3);
    absl::StatusOr<Loaded> graphs = Load(dir.version_path(), 8, Buckets(), /*graphs=*/true);
    absl::StatusOr<Loaded> eager = Load(dir.version_path(), 8, Buckets(), /*graphs=*/false);
    ASSERT_TRUE(graphs.ok()) << graphs.status();
    ASSERT_TRUE(eager.ok()) << eager.status();
    std::mt19937 rng(9);
    for (const Mix& mix : Mixes()) {
      SCOPED_TRACE(mix.label);
      std::vector<Tokens> inputs;
      for (const std::vector<int>& lengths : mix.requests) {
        inputs.push_back(MakeTokens(lengths, graphs->types, rng));
      }
      auto a = RunBatch(*graphs, inputs);
      auto b = RunBatch(*eager, inputs);
      ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
      for (size_t r = 0; r < inputs.size(); ++r) {
        ASSERT_EQ((*a)[r].outputs.size(), (*b)[r].outputs.size());
        for (size_t o = 0; o < (*a)[r].outputs.size(); ++o) {
          EXPECT_EQ((*a)[r].outputs[o].data, (*b)[r].outputs[o].data)
              << (*a)[r].outputs[o].name << " of request " << r;
        }
      }
    }
  }
}

TEST_F(GpuEncoderTest, ASequencesAnswerIsIndependentOfItsBatchMates) {
  const Arch arch{.label = "bert", .labels = 3, .normalize = true};
  TempDir dir;
  WriteCheckpoint(dir.version_path(), arch, DataType::kFp16, 4);
  // One bucket: alone or with mates, the sequence runs through the same graph, so its answer
  // must be the same bits (every kernel computes a row or a sequence from its own data only).
  auto one_bucket =
      Load(dir.version_path(), 8, {{"cuda_buckets", "8x256"}, {"max_batch_tokens", "256"}});
  ASSERT_TRUE(one_bucket.ok()) << one_bucket.status();
  // Three buckets: a different bucket runs GEMMs of another row count (possibly another
  // cuBLASLt algorithm), so only the FP16 tolerance holds.
  auto three = Load(dir.version_path(), 8, Buckets());
  ASSERT_TRUE(three.ok()) << three.status();
  std::mt19937 rng(21);
  const Tokens target = MakeTokens({11}, true, rng);
  const std::vector<std::vector<Tokens>> companies = {
      {},
      {MakeTokens({100}, true, rng)},
      {MakeTokens({1, 60, 7}, true, rng), MakeTokens({30, 30}, true, rng)},
  };
  for (Loaded* loaded : {&*one_bucket, &*three}) {
    std::vector<InferenceResponse> alone;
    for (size_t c = 0; c < companies.size(); ++c) {
      SCOPED_TRACE(
          absl::StrCat(loaded == &*one_bucket ? "one bucket" : "three buckets", ", company ", c));
      // The target in the middle of its mates.
      std::vector<Tokens> inputs = companies[c];
      inputs.insert(inputs.begin() + static_cast<long>(inputs.size() / 2), target);
      const size_t at = companies[c].size() / 2;
      auto got = RunBatch(*loaded, inputs);
      ASSERT_TRUE(got.ok()) << got.status();
      if (c == 0) {
        alone.push_back((*got)[at]);
        continue;
      }
      for (const Tensor& reference : alone[0].outputs) {
        const Tensor* tensor = Output((*got)[at], reference.name);
        ASSERT_NE(tensor, nullptr);
        if (loaded == &*one_bucket) {
          EXPECT_EQ(tensor->data, reference.data) << reference.name;
        } else {
          EXPECT_LE(RelativeError(Floats(*tensor), Floats(reference)), 2e-2) << reference.name;
        }
      }
    }
  }
}

TEST_F(GpuEncoderTest, TheDeviceCountsTheTokensAndSequencesSent) {
  const Arch arch{.label = "bert"};
  TempDir dir;
  WriteCheckpoint(dir.version_path(), arch, DataType::kFp32, 5);
  auto loaded = Load(dir.version_path(), 8, Buckets());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::mt19937 rng(2);
  std::uniform_int_distribution<int> length(1, 30);
  uint64_t tokens = 0;
  uint64_t sequences = 0;
  for (int b = 0; b < 50; ++b) {
    std::vector<Tokens> inputs;
    int rows = 0;
    while (rows < 6) {
      std::vector<int> lengths(1 + b % 2, 0);
      for (int& l : lengths) l = length(rng);
      inputs.push_back(MakeTokens(lengths, true, rng));
      rows += static_cast<int>(lengths.size());
    }
    for (const Tokens& t : inputs) {
      sequences += static_cast<uint64_t>(t.rows);
      // Packed tokens: up to and including each row's last 1 (the inner pad is packed too).
      for (int64_t r = 0; r < t.rows; ++r) {
        int64_t last = 0;
        for (int64_t c = 0; c < t.seq; ++c) {
          if (t.mask[r * t.seq + c] != 0) last = c + 1;
        }
        tokens += static_cast<uint64_t>(last);
      }
    }
    auto got = RunBatch(*loaded, inputs);
    ASSERT_TRUE(got.ok()) << got.status();
  }
  absl::StatusOr<DeviceCounters> counters = loaded->gpu->ReadCounters();
  ASSERT_TRUE(counters.ok()) << counters.status();
  EXPECT_EQ(counters->batches, 50u);
  EXPECT_EQ(counters->items, sequences);
  EXPECT_EQ(counters->sequences, sequences);
  EXPECT_EQ(counters->tokens, tokens);
  EXPECT_EQ(counters->non_finite_outputs, 0u);
  // What the stats collector gets, from that same read.
  EXPECT_EQ(loaded->gpu->ReadTokenCounter(), tokens);
}

TEST_F(GpuEncoderTest, ALoneRequestAboveTheLargestBucketFailsAloneAndNamesTheLimit) {
  const Arch arch{.label = "bert"};
  TempDir dir;
  WriteCheckpoint(dir.version_path(), arch, DataType::kFp32, 6);
  auto loaded =
      Load(dir.version_path(), 8, {{"cuda_buckets", "1x16,8x64"}, {"max_batch_tokens", "64"}});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::mt19937 rng(3);
  // 2 x 40 tokens: above the 64-token budget, so the batcher sends it alone, and no bucket holds
  // it.
  auto big = RunBatch(*loaded, {MakeTokens({40, 40}, true, rng)});
  ASSERT_TRUE(absl::IsInvalidArgument(big.status())) << big.status();
  EXPECT_NE(big.status().message().find("largest CUDA bucket (8 sequences, 64 tokens)"),
            std::string::npos)
      << big.status();
  EXPECT_TRUE(loaded->gpu->healthy());
  auto fine = RunBatch(*loaded, {MakeTokens({40}, true, rng)});
  ASSERT_TRUE(fine.ok()) << fine.status();
}

// The bundled `embedder` (text in, WordPiece-tokenized by the engine, mean pooling + Normalize)
// on the GPU through the engine, against the same model on the CPU backend.
TEST_F(GpuEncoderTest, TheBundledEmbedderOnTheGpuMatchesTheCpu) {
  // The source tree's models/, or gpu-check's packed copy of it (SLUICE_TEST_MODEL_REPOSITORY:
  // the source tree is not on the GPU machine).
  fs::path version = fs::path(SLUICE_SOURCE_DIR) / "models" / "embedder" / "1";
  if (const char* repository = std::getenv("SLUICE_TEST_MODEL_REPOSITORY"); repository != nullptr) {
    version = fs::path(repository) / "embedder" / "1";
  }
  ASSERT_TRUE(fs::exists(version / "config.json")) << version;
  std::vector<std::string> texts = {"hello world", "a longer sentence about inference servers", "x",
                                    "the quick brown fox jumps over the lazy dog"};
  std::map<InstanceKind, std::vector<std::vector<float>>> embeddings;
  // The engine's log: a KIND_GPU model without a GPU implementation would run on the CPU backend
  // (executor_factory.cc) and this comparison would pass CPU against CPU; the log says where it
  // ran.
  std::FILE* log = std::tmpfile();
  ASSERT_NE(log, nullptr);
  for (InstanceKind kind : {InstanceKind::kCpu, InstanceKind::kGpu}) {
    common::Logger logger({.sink = log});
    EngineOptions options;
    options.logger = &logger;
    options.device.kind = DeviceSelection::Kind::kCuda;
    options.device.cuda_device = 0;
    auto engine = Engine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    ModelSpec spec;
    spec.config.name = "embedder";
    spec.config.backend = "encoder";
    spec.config.max_batch_size = 32;
    spec.config.instance_kind = kind;
    spec.config.parameters = {{"max_batch_tokens", "4096"}};
    spec.version = 1;
    spec.version_path = version.string();
    const absl::Status loaded = (*engine)->LoadModel(spec);
    ASSERT_TRUE(loaded.ok()) << loaded;
    for (const std::string& text : texts) {
      std::vector<std::byte> element(4 + text.size());
      const uint32_t size = static_cast<uint32_t>(text.size());
      std::memcpy(element.data(), &size, 4);
      std::memcpy(element.data() + 4, text.data(), text.size());
      auto owned = std::make_shared<std::vector<std::byte>>(std::move(element));
      auto answer = std::make_shared<Answer>();
      auto request = std::make_unique<InferenceRequest>("embedder", -1, Answer::Into(answer));
      request->inputs.push_back(TensorView{"text", DataType::kBytes, {1, 1}, *owned});
      request->requested_outputs = {"embedding"};
      request->keepalive = owned;
      request->received_time = std::chrono::steady_clock::now();
      (*engine)->Submit(std::move(request));
      auto response = answer->WaitForResult(kWait);
      ASSERT_TRUE(response.ok()) << response.status();
      ASSERT_EQ(response->outputs.size(), 1u);
      embeddings[kind].push_back(Floats(response->outputs[0]));
    }
  }
  std::rewind(log);
  std::string text;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), log)) > 0;) text.append(buffer, n);
  std::fclose(log);
  ASSERT_NE(text.find("model 'embedder' instance 0: encoder on cuda:0"), std::string::npos)
      << "the KIND_GPU embedder did not run on the GPU; the engine's log:\n"
      << text;
  for (size_t i = 0; i < texts.size(); ++i) {
    // The embedder's checkpoint is FP32: fp32's tolerance (see the first test).
    EXPECT_LE(RelativeError(embeddings[InstanceKind::kGpu][i], embeddings[InstanceKind::kCpu][i]),
              2e-4)
        << texts[i];
  }
}

}  // namespace
}  // namespace sluice::engine::cuda
