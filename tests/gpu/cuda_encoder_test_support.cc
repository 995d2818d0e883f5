// Shared by the encoder's GPU tests (cuda_encoder_test.cc, cuda_encoder_behaviour_test.cc):
// checkpoints written here, token inputs and requests, the CPU model beside a GPU executor, one
// batch run on both, the architectures and ragged mixes the tests cover.

#include "tests/gpu/cuda_encoder_test_support.h"

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
#include "tests/gpu/gpu_required.h"
#include "tests/support/engine/answer.h"

namespace sluice::engine::cuda::encoder_testing {

using ::sluice::engine::testing::Answer;

namespace {

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

}  // namespace

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

// --- Requests -----------------------------------------------------------------------------------

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

absl::StatusOr<Loaded> Load(const fs::path& version, int max_batch_size,
                            std::map<std::string, std::string> parameters, bool graphs) {
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
    std::vector<std::vector<Tensor>>* cpu_answers) {
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

const std::map<std::string, std::string>& Buckets() {
  static const std::map<std::string, std::string> buckets = {{"cuda_buckets", "1x16,4x64,8x256"},
                                                             {"max_batch_tokens", "256"}};
  return buckets;
}

}  // namespace sluice::engine::cuda::encoder_testing
