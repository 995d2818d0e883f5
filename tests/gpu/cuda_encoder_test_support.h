#pragma once

// What the encoder's GPU tests share (cuda_encoder_test.cc: against the CPU backend;
// cuda_encoder_behaviour_test.cc: graphs, batch-mates, counters, limits, the bundled embedder):
// checkpoints written here, token inputs and requests, the CPU model beside a GPU executor over
// the same checkpoint, one batch run on both, and the architectures and ragged mixes covered.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/core/backend.h"
#include "engine/core/inference_request.h"
#include "engine/core/model_stats.h"
#include "engine/core/tensor.h"
#include "engine/cuda/cuda_executor.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_required.h"

namespace sluice::engine::cuda::encoder_testing {

namespace fs = std::filesystem;

inline constexpr auto kWait = std::chrono::seconds(60);
inline constexpr int kVocab = 100;
inline constexpr int kPositions = 130;

// --- Checkpoints --------------------------------------------------------------------------------

struct Arch {
  std::string label;
  std::string model_type = "bert";
  int hidden = 64;
  int heads = 4;
  int intermediate = 128;
  int layers = 2;
  std::string act = "gelu";
  bool pooler = true;
  int labels = 0;  // > 0: a classification head (BERT's on the pooler, RoBERTa's own)
  std::vector<std::string> pooling = {"mean"};
  bool normalize = false;
};

// Writes a checkpoint of `arch` with weights stored as `dtype` into `folder` (the version folder).
void WriteCheckpoint(const fs::path& folder, const Arch& arch, DataType dtype, uint32_t seed);

// A temporary folder, removed at the end.
class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            absl::StrCat("sluice_gpu_encoder_test_", ::getpid(), "_", counter_++);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  fs::path version_path() const { return path_ / "1"; }

 private:
  static inline std::atomic<int> counter_{0};
  fs::path path_;
};

// --- Requests -----------------------------------------------------------------------------------

// One request's token inputs ([rows, seq] INT64), owned.
struct Tokens {
  int64_t rows = 0;
  int64_t seq = 0;
  std::vector<int64_t> ids;
  std::vector<int64_t> mask;
  std::vector<int64_t> types;
};

// A request of `lengths.size()` rows padded to the longest: row r holds lengths[r] tokens (random
// ids, the first 1s-masked token in the middle for rows of >= 6 tokens, as an inner pad), mask 0
// after them. `types`: token types 0/1 (BERT).
Tokens MakeTokens(const std::vector<int>& lengths, bool types, std::mt19937& rng);

// The request of `tokens` for `model`, bound as the encoder's validation binds it.
std::unique_ptr<InferenceRequest> MakeRequest(const std::string& model, const Tokens& tokens,
                                              bool with_types, InferenceRequest::Completion done);

std::vector<float> Floats(const Tensor& tensor);

// max |got - want| / max(max |want|, floor).
double RelativeError(const std::vector<float>& got, const std::vector<float>& want);

// The CPU model and a GPU executor over the same checkpoint.
struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<ModelInstance> cpu;
  std::unique_ptr<ModelStats> stats;
  std::unique_ptr<CudaExecutor> gpu;
  bool types = false;
};

// The encoder at `version` (model "enc") on the CPU and on GPU 0, two slots, graphs as asked.
absl::StatusOr<Loaded> Load(const fs::path& version, int max_batch_size,
                            std::map<std::string, std::string> parameters, bool graphs = true);

// Runs `inputs` as one batch on the GPU executor (the requests' answers, in order) and, when
// `cpu_answers` is given, the same requests on the CPU instance first.
absl::StatusOr<std::vector<InferenceResponse>> RunBatch(
    Loaded& loaded, const std::vector<Tokens>& inputs,
    std::vector<std::vector<Tensor>>* cpu_answers = nullptr);

// The output `name` of `response`, or null.
const Tensor* Output(const InferenceResponse& response, const std::string& name);

class GpuEncoderTest : public ::testing::Test {
 protected:
  void SetUp() override { SLUICE_SKIP_WITHOUT_GPU(); }
};

// The checkpoints the GPU tests run: every head size the attention kernel has (16/32/64/128),
// BERT and RoBERTa (positions after pad_token_id, no token types), the three intermediate
// activations (exact GELU: our kernel; tanh GELU and ReLU: cuBLASLt epilogues), every pooling
// mode with and without Normalize, the pooler, and both classification heads.
const std::vector<Arch>& TestArches();

// Ragged mixes that land in each bucket of "1x16,4x64,8x256" (max_batch_size 8, 256 tokens): per
// bucket, requests of [rows] lengths.
struct Mix {
  const char* label;
  int bucket;
  std::vector<std::vector<int>> requests;
};
const std::vector<Mix>& Mixes();

// The buckets and token budget the mixes are made for.
const std::map<std::string, std::string>& Buckets();

}  // namespace sluice::engine::cuda::encoder_testing
