// GPU tests of the encoder (CTest label `gpu`): the CUDA executor's ragged path against the CPU
// backend on checkpoints written here (BERT and RoBERTa, head sizes 16/32/64/128, every pooling
// mode, pooler and both classifier heads, the three GELU/ReLU epilogue paths, FP32/TF32/FP16/
// BF16), at every (sequences, tokens) bucket and on ragged mixes; CUDA graph replay against
// plain launches bit for bit; a sequence's answer independent of its batch-mates; the device's
// token and sequence counters against what was sent; the bundled `embedder` (text in, tokenized
// by the engine) on the GPU against the CPU. Each test skips with the reason where no GPU is
// usable and fails instead under SLUICE_GPU_TESTS_REQUIRED=1.

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
#include "engine/testing/answer.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_required.h"

namespace sluice::engine::cuda {
namespace {

namespace fs = std::filesystem;
using testing::Answer;

constexpr auto kWait = std::chrono::seconds(60);
constexpr int kVocab = 100;
constexpr int kPositions = 130;

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

std::vector<std::byte> Encode(const std::vector<float>& values, DataType dtype) {
  std::vector<std::byte> out;
  if (dtype == DataType::kFp32) {
    out.resize(values.size() * 4);
    std::memcpy(out.data(), values.data(), out.size());
    return out;
  }
  for (float v : values) {
    const uint16_t bits =
        dtype == DataType::kFp16 ? wire::FloatToHalf(v) : wire::FloatToBFloat16(v);
    out.push_back(static_cast<std::byte>(bits & 0xff));
    out.push_back(static_cast<std::byte>(bits >> 8));
  }
  return out;
}

// Writes a checkpoint of `arch` with weights stored as `dtype` into `folder` (the version folder).
void WriteCheckpoint(const fs::path& folder, const Arch& arch, DataType dtype, uint32_t seed) {
  fs::create_directories(folder);
  const bool roberta = arch.model_type == "roberta";
  const int h = arch.hidden;
  const int types = roberta ? 1 : 2;
  const int pad = roberta ? 1 : 0;
  std::ofstream(folder / "config.json")
      << "{\"model_type\": \"" << arch.model_type << "\", \"hidden_size\": " << h
      << ", \"num_hidden_layers\": " << arch.layers << ", \"num_attention_heads\": " << arch.heads
      << ", \"intermediate_size\": " << arch.intermediate << ", \"hidden_act\": \"" << arch.act
      << "\", \"vocab_size\": " << kVocab << ", \"max_position_embeddings\": " << kPositions
      << ", \"type_vocab_size\": " << types << ", \"pad_token_id\": " << pad
      << ", \"layer_norm_eps\": 1e-12}";
  std::vector<std::string> modules = {
      R"({"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"})",
      R"({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"})"};
  if (arch.normalize) {
    modules.push_back(
        R"({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})");
  }
  std::ofstream(folder / "modules.json") << "[" << absl::StrJoin(modules, ", ") << "]";
  fs::create_directories(folder / "1_Pooling");
  auto mode = [&](const char* name) {
    return std::find(arch.pooling.begin(), arch.pooling.end(), name) != arch.pooling.end()
               ? "true"
               : "false";
  };
  std::ofstream(folder / "1_Pooling" / "config.json")
      << "{\"word_embedding_dimension\": " << h << ", \"pooling_mode_cls_token\": " << mode("cls")
      << ", \"pooling_mode_max_tokens\": " << mode("max")
      << ", \"pooling_mode_mean_tokens\": " << mode("mean")
      << ", \"pooling_mode_mean_sqrt_len_tokens\": " << mode("mean_sqrt_len") << "}";

  std::mt19937 rng(seed);
  std::map<std::string, std::pair<Shape, std::vector<std::byte>>> tensors;
  auto add = [&](const std::string& name, Shape shape, float scale) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::normal_distribution<float> normal(0.f, scale);
    std::vector<float> values(static_cast<size_t>(n));
    for (float& v : values) v = normal(rng);
    if (name.find("LayerNorm.weight") != std::string::npos) {
      for (float& v : values) v += 1.f;
    }
    tensors[name] = {shape, Encode(values, dtype)};
  };
  const float w = 1.f / std::sqrt(static_cast<float>(h));
  add("embeddings.word_embeddings.weight", {kVocab, h}, 0.5f);
  add("embeddings.position_embeddings.weight", {kPositions, h}, 0.5f);
  add("embeddings.token_type_embeddings.weight", {types, h}, 0.5f);
  add("embeddings.LayerNorm.weight", {h}, 0.1f);
  add("embeddings.LayerNorm.bias", {h}, 0.1f);
  for (int l = 0; l < arch.layers; ++l) {
    const std::string p = absl::StrCat("encoder.layer.", l, ".");
    for (const char* part : {"query", "key", "value"}) {
      add(absl::StrCat(p, "attention.self.", part, ".weight"), {h, h}, w);
      add(absl::StrCat(p, "attention.self.", part, ".bias"), {h}, 0.1f);
    }
    add(p + "attention.output.dense.weight", {h, h}, w);
    add(p + "attention.output.dense.bias", {h}, 0.1f);
    add(p + "attention.output.LayerNorm.weight", {h}, 0.1f);
    add(p + "attention.output.LayerNorm.bias", {h}, 0.1f);
    add(p + "intermediate.dense.weight", {arch.intermediate, h}, w);
    add(p + "intermediate.dense.bias", {arch.intermediate}, 0.1f);
    add(p + "output.dense.weight", {h, arch.intermediate},
        1.f / std::sqrt(static_cast<float>(arch.intermediate)));
    add(p + "output.dense.bias", {h}, 0.1f);
    add(p + "output.LayerNorm.weight", {h}, 0.1f);
    add(p + "output.LayerNorm.bias", {h}, 0.1f);
  }
  if (arch.pooler) {
    add("pooler.dense.weight", {h, h}, w);
    add("pooler.dense.bias", {h}, 0.1f);
  }
  if (arch.labels > 0 && roberta) {
    add("classifier.dense.weight", {h, h}, w);
    add("classifier.dense.bias", {h}, 0.1f);
    add("classifier.out_proj.weight", {arch.labels, h}, w);
    add("classifier.out_proj.bias", {arch.labels}, 0.1f);
  } else if (arch.labels > 0) {
    add("classifier.weight", {arch.labels, h}, w);
    add("classifier.bias", {arch.labels}, 0.1f);
  }
  std::vector<TensorView> views;
  for (const auto& [name, entry] : tensors) {
    views.push_back(TensorView{name, dtype, entry.first, entry.second});
  }
  ASSERT_TRUE(models::WriteSafetensorsFile((folder / "model.safetensors").string(), views).ok());
}

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
Tokens MakeTokens(const std::vector<int>& lengths, bool types, std::mt19937& rng) {
  Tokens t;
  t.rows = static_cast<int64_t>(lengths.size());
  t.seq = *std::max_element(lengths.begin(), lengths.end());
  std::uniform_int_distribution<int64_t> id(2, kVocab - 1);
  for (int64_t r = 0; r < t.rows; ++r) {
    for (int64_t c = 0; c < t.seq; ++c) {
      const bool in = c < lengths[r];
      t.ids.push_back(in ? id(rng) : 0);
      t.mask.push_back(in && !(lengths[r] >= 6 && c == lengths[r] / 2) ? 1 : 0);
      t.types.push_back(types && in && c >= lengths[r] / 2 ? 1 : 0);
    }
  }
  return t;
}

std::unique_ptr<InferenceRequest> MakeRequest(const std::string& model, const Tokens& tokens,
                                              bool with_types, InferenceRequest::Completion done) {
  auto owned = std::make_shared<std::vector<std::vector<std::byte>>>();
  auto bytes = [](const std::vector<int64_t>& values) {
    std::vector<std::byte> out(values.size() * 8);
    std::memcpy(out.data(), values.data(), out.size());
    return out;
  };
  owned->push_back(bytes(tokens.ids));
  owned->push_back(bytes(tokens.mask));
  if (with_types) owned->push_back(bytes(tokens.types));
  auto request = std::make_unique<InferenceRequest>(model, -1, std::move(done));
  const Shape shape = {tokens.rows, tokens.seq};
  request->inputs.push_back(TensorView{"input_ids", DataType::kInt64, shape, (*owned)[0]});
  request->inputs.push_back(TensorView{"attention_mask", DataType::kInt64, shape, (*owned)[1]});
  if (with_types) {
    request->inputs.push_back(TensorView{"token_type_ids", DataType::kInt64, shape, (*owned)[2]});
  }
  request->keepalive = owned;
  // As the encoder's request validation binds them: rows, and packed tokens (each row up to and
  // including its mask's last 1).
  request->batch_size = static_cast<int>(tokens.rows);
  for (int64_t r = 0; r < tokens.rows; ++r) {
    for (int64_t c = tokens.seq; c > 0; --c) {
      if (tokens.mask[r * tokens.seq + c - 1] != 0) {
        request->token_count += c;
        break;
      }
    }
  }
  request->received_time = std::chrono::steady_clock::now();
  return request;
}

std::vector<float> Floats(const Tensor& tensor) {
  std::vector<float> values(tensor.data.size() / 4);
  std::memcpy(values.data(), tensor.data.data(), values.size() * 4);
  return values;
}

// max |got - want| / max(max |want|, floor).
double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0;
  double scale = 1e-3;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return diff / scale;
}

// The CPU model and a GPU executor over the same checkpoint.
struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<ModelInstance> cpu;
  std::unique_ptr<ModelStats> stats;
  std::unique_ptr<CudaExecutor> gpu;
  bool types = false;
};

absl::StatusOr<Loaded> Load(const fs::path& version, int max_batch_size,
                            std::map<std::string, std::string> parameters, bool graphs = true) {
  ModelSpec spec;
  spec.config.name = "enc";
  spec.config.backend = "encoder";
  spec.config.max_batch_size = max_batch_size;
  spec.config.parameters = std::move(parameters);
  spec.version = 1;
  spec.version_path = version.string();
  Loaded loaded;
  absl::StatusOr<std::unique_ptr<Model>> model = models::CreateEncoderModel(spec);
  if (!model.ok()) return model.status();
  loaded.model = *std::move(model);
  absl::StatusOr<std::unique_ptr<ModelInstance>> cpu = loaded.model->CreateInstance(0);
  if (!cpu.ok()) return cpu.status();
  loaded.cpu = *std::move(cpu);
  loaded.types = loaded.model->config().FindInput("token_type_ids") != nullptr;
  absl::StatusOr<std::unique_ptr<CudaRaggedModel>> ragged = CreateCudaRaggedModel(*loaded.model, 0);
  if (!ragged.ok()) return ragged.status();
  loaded.stats = std::make_unique<ModelStats>(ModelStatsOptions{.model_name = "enc"});
  CudaExecutorOptions options;
  options.executor.slot_count = 2;
  options.executor.stats = loaded.stats.get();
  options.use_graphs = graphs;
  absl::StatusOr<std::unique_ptr<CudaExecutor>> gpu =
      CudaExecutor::CreateRagged(loaded.model->config(), *std::move(ragged), options);
  if (!gpu.ok()) return gpu.status();
  loaded.gpu = *std::move(gpu);
  return loaded;
}

// Runs `inputs` as one batch on the GPU executor (the requests' answers, in order) and, when
// `cpu_answers` is given, the same requests on the CPU instance first.
absl::StatusOr<std::vector<InferenceResponse>> RunBatch(
    Loaded& loaded, const std::vector<Tokens>& inputs,
    std::vector<std::vector<Tensor>>* cpu_answers = nullptr) {
  std::vector<std::shared_ptr<Answer>> answers;
  Batch batch;
  for (const Tokens& tokens : inputs) {
    answers.push_back(std::make_shared<Answer>());
    batch.requests.push_back(
        MakeRequest("enc", tokens, loaded.types, Answer::Into(answers.back())));
    batch.items += static_cast<int>(tokens.rows);
    batch.tokens += batch.requests.back()->token_count;
  }
  if (cpu_answers != nullptr) {
    std::vector<const InferenceRequest*> requests;
    for (const auto& request : batch.requests) requests.push_back(request.get());
    absl::StatusOr<std::vector<std::vector<Tensor>>> cpu = loaded.cpu->RunRagged(requests);
    if (!cpu.ok()) return cpu.status();
    *cpu_answers = *std::move(cpu);
  }
  batch.dispatch_time = std::chrono::steady_clock::now();
  // A slot frees when the previous batch's answers are out; the tests run one batch at a time.
  for (int i = 0; i < 1000 && !loaded.gpu->HasFreeSlot(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  loaded.gpu->Execute(std::move(batch));
  std::vector<InferenceResponse> responses;
  for (const auto& answer : answers) {
    absl::StatusOr<InferenceResponse> response = answer->WaitForResult(kWait);
    if (!response.ok()) return response.status();
    responses.push_back(*std::move(response));
  }
  return responses;
}

const Tensor* Output(const InferenceResponse& response, const std::string& name) {
  for (const Tensor& tensor : response.outputs) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

class GpuEncoderTest : public ::testing::Test {
 protected:
  void SetUp() override { SLUICE_SKIP_WITHOUT_GPU(); }
};

// The checkpoints the GPU tests run: every head size the attention kernel has (16/32/64/128),
// BERT and RoBERTa (positions after pad_token_id, no token types), the three intermediate
// activations (exact GELU: our kernel; tanh GELU and ReLU: cuBLASLt epilogues), every pooling
// mode with and without Normalize, the pooler, and both classification heads.
const std::vector<Arch>& TestArches() {
  static const std::vector<Arch> arches = {
      {.label = "bert d16 gelu-erf mean+normalize pooler classifier",
       .labels = 3,
       .normalize = true},
      {.label = "roberta d64 gelu-tanh cls+max+mean_sqrt_len classifier",
       .model_type = "roberta",
       .hidden = 128,
       .heads = 2,
       .act = "gelu_new",
       .pooler = false,
       .labels = 2,
       .pooling = {"cls", "max", "mean_sqrt_len"}},
      {.label = "bert d128 relu cls no pooler",
       .hidden = 256,
       .heads = 2,
       .intermediate = 256,
       .act = "relu",
       .pooler = false,
       .pooling = {"cls"}},
      {.label = "bert d32 mean_sqrt_len+max normalize",
       .hidden = 64,
       .heads = 2,
       .pooling = {"max", "mean_sqrt_len"},
       .normalize = true},
  };
  return arches;
}

// Ragged mixes that land in each bucket of "1x16,4x64,8x256" (max_batch_size 8, 256 tokens): per
// bucket, requests of [rows] lengths.
struct Mix {
  const char* label;
  int bucket;
  std::vector<std::vector<int>> requests;
};
const std::vector<Mix>& Mixes() {
  static const std::vector<Mix> mixes = {
      {"one short sequence", 0, {{5}}},
      {"one sequence filling bucket 0", 0, {{16}}},
      {"two requests, bucket 1", 1, {{3}, {40, 7}}},
      {"four sequences filling bucket 1", 1, {{16, 16}, {16, 16}}},
      {"one long and many short", 2, {{128}, {1, 2, 3}, {9, 4, 1}}},
      {"full bucket 2", 2, {{32, 32, 32, 32}, {32, 32, 32, 32}}},
      {"lengths 1..8", 2, {{1, 2, 3, 4}, {5, 6, 7, 8}}},
  };
  return mixes;
}
const std::map<std::string, std::string> kBuckets = {{"cuda_buckets", "1x16,4x64,8x256"},
                                                     {"max_batch_tokens", "256"}};

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
    spec.config.parameters = kBuckets;
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
      std::map<std::string, std::string> parameters = kBuckets;
      parameters.insert(precision.parameters.begin(), precision.parameters.end());
      absl::StatusOr<Loaded> loaded = Load(dir.version_path(), 8, parameters);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      ASSERT_EQ(loaded->gpu->ragged_buckets().size(), 3u);
      // What cuBLASLt fused on this GPU: in the log of the first GPU run.
      std::printf("%s, %s: %s\n", arch.label.c_str(), precision.label,
                  loaded->gpu->ragged_summary().c_str());
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
            EXPECT_LE(RelativeError(Floats(*tensor), Floats(want[r][o])), precision.tolerance)
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

TEST_F(GpuEncoderTest, GraphReplayEqualsPlainLaunchesBitForBit) {
  const Arch arch{.label = "bert", .labels = 3, .normalize = true};
  for (DataType dtype : {DataType::kFp16, DataType::kFp32}) {
    TempDir dir;
    WriteCheckpoint(dir.version_path(), arch, dtype, 3);
    absl::StatusOr<Loaded> graphs = Load(dir.version_path(), 8, kBuckets, /*graphs=*/true);
    absl::StatusOr<Loaded> eager = Load(dir.version_path(), 8, kBuckets, /*graphs=*/false);
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
  auto three = Load(dir.version_path(), 8, kBuckets);
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
  auto loaded = Load(dir.version_path(), 8, kBuckets);
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
