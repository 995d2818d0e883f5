// GPU tests of the encoder against the CPU backend (CTest label `gpu`; binary
// gpu_cuda_encoder_test with cuda_encoder_behaviour_test.cc): the CUDA executor's ragged path on
// checkpoints written here (BERT and RoBERTa, head sizes 16/32/64/128, every pooling mode, pooler
// and both classifier heads, the three GELU/ReLU epilogue paths, FP32/TF32/FP16/BF16), at every
// (sequences, tokens) bucket and on ragged mixes. Each test skips with the reason where no GPU is
// usable and fails instead under SLUICE_GPU_TESTS_REQUIRED=1.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_executor.h"
#include "engine/cuda/cuda_model.h"
#include "engine/models/encoder/encoder_model.h"
#include "gtest/gtest.h"
#include "tests/gpu/cuda_encoder_test_support.h"
#include "tests/gpu/gpu_required.h"

namespace sluice::engine::cuda {
namespace {

using namespace encoder_testing;  // NOLINT: the tests' shared vocabulary

// Runs everywhere (no GPU): the checkpoints and mixes the GPU tests use load and run on the CPU
// backend, with the outputs the GPU tests compare, so that a GPU run fails only on the GPU's
// account.
TEST(EncoderGpuTestInputs, CheckpointsAndMixesRunOnTheCpu) {
  for (const Arch& arch : TestArches()) {
    SCOPED_TRACE(arch.label);
    TempDir dir;
    WriteCheckpoint(dir.version_path(), arch, DataType::kBf16, 1);
    ModelSpec spec;
    spec.config.name = "enc";
    spec.config.backend = "encoder";
    spec.config.max_batch_size = 8;
    spec.config.parameters = Buckets();
    spec.version = 1;
    spec.version_path = dir.version_path().string();
    auto model = models::CreateEncoderModel(spec);
    ASSERT_TRUE(model.ok()) << model.status();
    auto cpu = (*model)->CreateInstance(0);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    const ModelConfig& config = (*model)->config();
    const bool types = config.FindInput("token_type_ids") != nullptr;
    EXPECT_EQ(types, arch.model_type == "bert");
    EXPECT_EQ(config.FindOutput("pooler_output") != nullptr, arch.pooler);
    EXPECT_EQ(config.FindOutput("logits") != nullptr, arch.labels > 0);
    std::mt19937 rng(1);
    for (const Mix& mix : Mixes()) {
      std::vector<std::unique_ptr<InferenceRequest>> requests;
      std::vector<const InferenceRequest*> pointers;
      int64_t tokens = 0;
      int sequences = 0;
      for (const std::vector<int>& lengths : mix.requests) {
        requests.push_back(MakeRequest("enc", MakeTokens(lengths, types, rng), types, nullptr));
        pointers.push_back(requests.back().get());
        tokens += requests.back()->token_count;
        sequences += requests.back()->batch_size;
      }
      // The mix fits the bucket it is meant for and no smaller one.
      const std::vector<std::pair<int, int64_t>> buckets = {{1, 16}, {4, 64}, {8, 256}};
      EXPECT_TRUE(sequences <= buckets[mix.bucket].first && tokens <= buckets[mix.bucket].second)
          << mix.label;
      if (mix.bucket > 0) {
        EXPECT_FALSE(sequences <= buckets[mix.bucket - 1].first &&
                     tokens <= buckets[mix.bucket - 1].second)
            << mix.label;
      }
      auto outputs = (*cpu)->RunRagged(pointers);
      ASSERT_TRUE(outputs.ok()) << outputs.status();
      for (const std::vector<Tensor>& per_request : *outputs) {
        ASSERT_EQ(per_request.size(), config.outputs.size());
        for (const Tensor& tensor : per_request) {
          for (float v : Floats(tensor)) ASSERT_TRUE(std::isfinite(v)) << tensor.name;
        }
      }
    }
  }
}

// The FP32 bound where cuBLASLt's GELU epilogue computes the tanh GELU (see the test).
constexpr double kFusedTanhGeluFp32 = 5e-3;

struct Precision {
  const char* label;
  DataType stored;
  std::map<std::string, std::string> parameters;
  // max |gpu - cpu| / max |cpu| per output and request (see the test's comment).
  double tolerance;
};

TEST_F(GpuEncoderTest, MatchesTheCpuBackendAtEveryBucketAndRaggedMix) {
  // Tolerances, relative to the largest reference value of each output (two layers; the CPU
  // reference computes in FP32 from the same stored weights, widened exactly):
  //  - fp32 2e-4: both sides FP32; sums reordered (cuBLASLt's tiling and our attention's online
  //    softmax against OpenBLAS and a two-pass softmax), erf/exp/tanh from different libraries
  //    (~1e-7 relative each); LayerNorm divides by a standard deviation that can be ~0.1 of the
  //    values, which amplifies ~1e-6 differences tenfold; 2e-4 is far below a wrong index or
  //    layout, which is O(1).
  //  - tf32 2e-2: TF32 tensor cores round every GEMM input to 10 mantissa bits (2^-11 ~ 4.9e-4);
  //    sums of up to 128 such products and two layers give a few 1e-3.
  //  - fp16 2e-2: the activations between kernels are stored in FP16 (2^-11 per rounding) at
  //    about 15 roundings per layer; accumulation and LayerNorm are FP32.
  //  - bf16 6e-2: the same with BF16's 8 bits (2^-9 ~ 2e-3 per rounding).
  // The FP32 bound holds where every activation is computed in FP32 by exact functions. Where the
  // executor's summary says the tanh GELU runs in cuBLASLt's epilogue (RoBERTa's gelu_new here),
  // cuBLASLt may evaluate tanh with the hardware's approximation (PTX tanh.approx.f32: relative
  // error up to 2^-10.99, ~5e-4, documented in the PTX ISA): GELU = 0.5 x (1 + tanh(u)) then
  // differs by up to 0.5 |x| 5e-4 = 2.5e-4 of its input per element, which LayerNorm can amplify
  // up to tenfold (above) and two layers add: kFusedTanhGeluFp32 = 5e-3, still far below a wrong
  // index or layout. TF32/FP16/BF16 bounds already exceed it. Every failure prints the summary,
  // i.e. which path ran.
  const std::vector<Arch>& arches = TestArches();
  const std::vector<Precision> precisions = {
      {"fp32", DataType::kFp32, {}, 2e-4},
      {"tf32", DataType::kFp32, {{"allow_tf32", "true"}}, 2e-2},
      {"fp16", DataType::kFp16, {}, 2e-2},
      {"bf16", DataType::kBf16, {}, 6e-2},
  };
  uint32_t seed = 1;
  for (const Arch& arch : arches) {
    for (const Precision& precision : precisions) {
      SCOPED_TRACE(absl::StrCat(arch.label, ", ", precision.label));
      TempDir dir;
      WriteCheckpoint(dir.version_path(), arch, precision.stored, ++seed);
      std::map<std::string, std::string> parameters = Buckets();
      parameters.insert(precision.parameters.begin(), precision.parameters.end());
      absl::StatusOr<Loaded> loaded = Load(dir.version_path(), 8, parameters);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      ASSERT_EQ(loaded->gpu->ragged_buckets().size(), 3u);
      // What cuBLASLt fused on this GPU: in the log of the first GPU run, and in every failure.
      const std::string path = loaded->gpu->ragged_summary();
      std::printf("%s, %s: %s\n", arch.label.c_str(), precision.label, path.c_str());
      SCOPED_TRACE(path);
      const double tolerance =
          precision.stored == DataType::kFp32 && precision.parameters.empty() &&
                  path.find("tanh GELU in cuBLASLt's epilogue") != std::string::npos
              ? kFusedTanhGeluFp32
              : precision.tolerance;
      std::mt19937 rng(seed);
      std::vector<uint64_t> expected_batches(3, 0);
      for (const Mix& mix : Mixes()) {
        SCOPED_TRACE(mix.label);
        std::vector<Tokens> inputs;
        for (const std::vector<int>& lengths : mix.requests) {
          inputs.push_back(MakeTokens(lengths, loaded->types, rng));
        }
        std::vector<std::vector<Tensor>> want;
        absl::StatusOr<std::vector<InferenceResponse>> got = RunBatch(*loaded, inputs, &want);
        ASSERT_TRUE(got.ok()) << got.status();
        ++expected_batches[mix.bucket];
        const ModelConfig& config = loaded->model->config();
        for (size_t r = 0; r < inputs.size(); ++r) {
          ASSERT_EQ((*got)[r].outputs.size(), config.outputs.size());
          for (size_t o = 0; o < config.outputs.size(); ++o) {
            const std::string& name = config.outputs[o].name;
            const Tensor* tensor = Output((*got)[r], name);
            ASSERT_NE(tensor, nullptr) << name;
            EXPECT_EQ(tensor->shape, want[r][o].shape) << name;
            EXPECT_LE(RelativeError(Floats(*tensor), Floats(want[r][o])), tolerance)
                << "output " << name << " of request " << r;
          }
        }
      }
      // Each mix ran in the bucket it was meant for (the smallest that holds it).
      absl::StatusOr<DeviceCounters> counters = loaded->gpu->ReadCounters();
      ASSERT_TRUE(counters.ok()) << counters.status();
      for (int b = 0; b < 3; ++b) {
        EXPECT_EQ(counters->bucket_batches[b], expected_batches[b]) << "bucket " << b;
      }
      EXPECT_EQ(counters->non_finite_outputs, 0u);
    }
  }
}

}  // namespace
}  // namespace sluice::engine::cuda
