#include "engine/models/mlp_model.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/wire/float16.h"
#include "engine/backend_registry.h"
#include "engine/engine.h"
#include "engine/models/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::engine::models {

using wire::BFloat16ToFloat;
using wire::FloatToBFloat16;
using wire::FloatToHalf;
using wire::HalfToFloat;
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// One layer as the test wrote it, with the FP32 values the model computes with (F16/BF16 weights
// rounded exactly as stored).
struct LayerData {
  int index = 0;
  int in = 0;
  int out = 0;
  std::vector<float> weight;  // [out, in]
  std::vector<float> bias;    // [out] or empty
};

double ApplyActivation(const std::string& name, double x) {
  if (name == "relu") return x > 0 ? x : 0;
  if (name == "gelu") return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  if (name == "gelu_tanh") {
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  if (name == "silu") return x / (1 + std::exp(-x));
  if (name == "sigmoid") return 1 / (1 + std::exp(-x));
  if (name == "tanh") return std::tanh(x);
  return x;  // none (softmax is applied per row below)
}

// The network in float64, from the same FP32 weights.
std::vector<double> Reference(const std::vector<LayerData>& layers,
                              const std::vector<std::string>& activations,
                              const std::vector<float>& input, int rows) {
  std::vector<double> current(input.begin(), input.end());
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerData& layer = layers[l];
    std::vector<double> next(static_cast<size_t>(rows) * layer.out);
    for (int r = 0; r < rows; ++r) {
      for (int o = 0; o < layer.out; ++o) {
        double sum = layer.bias.empty() ? 0.0 : layer.bias[o];
        for (int i = 0; i < layer.in; ++i) {
          sum += current[static_cast<size_t>(r) * layer.in + i] *
                 layer.weight[static_cast<size_t>(o) * layer.in + i];
        }
        next[static_cast<size_t>(r) * layer.out + o] = ApplyActivation(activations[l], sum);
      }
      if (activations[l] == "softmax") {
        double* row = next.data() + static_cast<size_t>(r) * layer.out;
        const double max = *std::max_element(row, row + layer.out);
        double total = 0;
        for (int o = 0; o < layer.out; ++o) total += (row[o] = std::exp(row[o] - max));
        for (int o = 0; o < layer.out; ++o) row[o] /= total;
      }
    }
    current = std::move(next);
  }
  return current;
}

// Largest error in a row relative to the row's largest magnitude (a per-element relative error
// would be meaningless for outputs that cancel to nearly zero).
double MaxRowRelativeError(const std::vector<float>& actual, const std::vector<double>& expected,
                           int rows) {
  const size_t width = expected.size() / rows;
  double worst = 0;
  for (int r = 0; r < rows; ++r) {
    double scale = 1e-30;
    double error = 0;
    for (size_t c = 0; c < width; ++c) {
      scale = std::max(scale, std::fabs(expected[r * width + c]));
      error = std::max(error, std::fabs(actual[r * width + c] - expected[r * width + c]));
    }
    worst = std::max(worst, error / scale);
  }
  return worst;
}

std::vector<float> RandomFloats(std::mt19937& rng, size_t count, float bound) {
  std::uniform_real_distribution<float> dist(-bound, bound);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

std::vector<std::byte> Encode(const std::vector<float>& values, DataType dtype) {
  const size_t size = DataTypeByteSize(dtype);
  std::vector<std::byte> bytes(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DataType::kFp32) {
      std::memcpy(bytes.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t bits =
          dtype == DataType::kFp16 ? FloatToHalf(values[i]) : FloatToBFloat16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  }
  return bytes;
}

// What the model sees after loading `values` stored as `dtype`.
std::vector<float> Rounded(std::vector<float> values, DataType dtype) {
  for (float& v : values) {
    if (dtype == DataType::kFp16) v = HalfToFloat(FloatToHalf(v));
    if (dtype == DataType::kBf16) v = BFloat16ToFloat(FloatToBFloat16(v));
  }
  return values;
}

std::vector<float> RunRows(ModelInstance& instance, const std::vector<float>& input, int rows,
                           int in_features, size_t misalign = 0) {
  // `misalign` shifts the input bytes off float alignment, as an arbitrary request buffer may be.
  std::vector<std::byte> buffer(input.size() * sizeof(float) + misalign);
  if (!input.empty()) std::memcpy(buffer.data() + misalign, input.data(), input.size() * 4);
  const TensorView view{"INPUT0",
                        DataType::kFp32,
                        {rows, in_features},
                        std::span<const std::byte>(buffer.data() + misalign, input.size() * 4)};
  absl::StatusOr<std::vector<Tensor>> outputs = instance.Run(std::span<const TensorView>(&view, 1));
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  if (!outputs.ok()) return {};
  EXPECT_EQ(outputs->size(), 1u);
  const Tensor& out = (*outputs)[0];
  EXPECT_EQ(out.name, "OUTPUT0");
  EXPECT_EQ(out.dtype, DataType::kFp32);
  EXPECT_EQ(out.shape.size(), 2u);
  EXPECT_EQ(out.shape[0], rows);
  std::vector<float> values(out.data.size() / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), out.data.data(), out.data.size());
  return values;
}

class MlpModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("mlp_model_test_", getpid(), "_", counter_++);
    std::filesystem::create_directories(dir_ / "1");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes an MLP with the given feature sizes (input first) to 1/<file>; layer l is stored as
  // "<index_step * l>.weight" / ".bias". Returns the layers as the model will compute with them.
  std::vector<LayerData> WriteLayers(const std::vector<int>& sizes,
                                     DataType dtype = DataType::kFp32, bool bias = true,
                                     const std::string& file = "model.safetensors",
                                     int index_step = 2) {
    std::vector<LayerData> layers;
    for (size_t l = 0; l + 1 < sizes.size(); ++l) {
      LayerData layer;
      layer.index = static_cast<int>(l) * index_step;
      layer.in = sizes[l];
      layer.out = sizes[l + 1];
      const float bound = 1.f / std::sqrt(static_cast<float>(layer.in));
      layer.weight = RandomFloats(rng_, static_cast<size_t>(layer.in) * layer.out, bound);
      if (bias) layer.bias = RandomFloats(rng_, layer.out, bound);
      layers.push_back(std::move(layer));
    }
    WriteFile(layers, dtype, file);
    for (LayerData& layer : layers) {
      layer.weight = Rounded(layer.weight, dtype);
      layer.bias = Rounded(layer.bias, dtype);
    }
    return layers;
  }

  void WriteFile(const std::vector<LayerData>& layers, DataType dtype,
                 const std::string& file = "model.safetensors") {
    std::vector<std::vector<std::byte>> storage;
    storage.reserve(2 * layers.size());
    std::vector<TensorView> tensors;
    for (const LayerData& layer : layers) {
      storage.push_back(Encode(layer.weight, dtype));
      tensors.push_back(
          {absl::StrCat(layer.index, ".weight"), dtype, {layer.out, layer.in}, storage.back()});
      if (!layer.bias.empty()) {
        storage.push_back(Encode(layer.bias, dtype));
        tensors.push_back({absl::StrCat(layer.index, ".bias"),
                           dtype,
                           {static_cast<int64_t>(layer.bias.size())},
                           storage.back()});
      }
    }
    ASSERT_TRUE(WriteSafetensorsFile((dir_ / "1" / file).string(), tensors).ok());
  }

  ModelSpec Spec(int in, int out, int max_batch_size = 16,
                 std::map<std::string, std::string> parameters = {}) const {
    ModelSpec spec;
    spec.config.name = "mlp_test";
    spec.config.backend = "mlp";
    spec.config.max_batch_size = max_batch_size;
    spec.config.inputs = {{"INPUT0", DataType::kFp32, {in}}};
    spec.config.outputs = {{"OUTPUT0", DataType::kFp32, {out}}};
    spec.config.parameters = std::move(parameters);
    spec.version = 1;
    spec.version_path = (dir_ / "1").string();
    return spec;
  }

  std::unique_ptr<ModelInstance> Instance(const ModelSpec& spec) {
    absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(spec);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return nullptr;
    model_ = *std::move(model);
    auto instance = model_->CreateInstance(0);
    EXPECT_TRUE(instance.ok()) << instance.status();
    return instance.ok() ? *std::move(instance) : nullptr;
  }

  // The load error of `spec` (expects one, with the given code).
  std::string LoadError(const ModelSpec& spec,
                        absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
    absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(spec);
    EXPECT_FALSE(model.ok());
    if (model.ok()) return "";
    EXPECT_EQ(model.status().code(), code) << model.status();
    // Every load error says which model and version failed.
    EXPECT_THAT(std::string(model.status().message()),
                HasSubstr("model 'mlp_test' version 1 (backend mlp): "));
    return std::string(model.status().message());
  }

  static inline int counter_ = 0;
  std::filesystem::path dir_;
  std::mt19937 rng_{2024};
  std::unique_ptr<Model> model_;
};

TEST_F(MlpModelTest, MatchesFloat64ReferenceAtBatchSizes1_3AndMax) {
  const std::vector<LayerData> layers = WriteLayers({784, 512, 512, 10});
  constexpr int kMaxBatch = 16;
  auto instance = Instance(Spec(784, 10, kMaxBatch));
  ASSERT_NE(instance, nullptr);
  for (int rows : {1, 3, kMaxBatch}) {
    const std::vector<float> x = RandomFloats(rng_, static_cast<size_t>(rows) * 784, 1.f);
    const std::vector<float> y = RunRows(*instance, x, rows, 784);
    ASSERT_EQ(y.size(), static_cast<size_t>(rows) * 10);
    // Defaults: relu after the hidden layers, nothing after the last.
    const std::vector<double> expected = Reference(layers, {"relu", "relu", "none"}, x, rows);
    EXPECT_LT(MaxRowRelativeError(y, expected, rows), 1e-5) << "batch " << rows;
  }
}

// Batching must not change a request's answer beyond FP32 rounding. Not bit for bit: OpenBLAS
// runs a row through a different micro-kernel path depending on its position in the M blocking
// (measured: rows 0-5 and 13-15 of a 16-row batch differ from the row alone by 1-3 ULP, rows 6-12
// are identical). How far apart the two paths land depends on the CPU OpenBLAS picks its kernels
// for: 1-3 ULP of the row's scale on AMD Zen 4, 1.37e-6 (~11 ULP) on row 11 on an Intel
// Sapphire Rapids VM (OpenBLAS 0.3.21). So the bound is tens of ULPs, half the reference bound;
// a row mixed with another's, or read from the wrong offset, is off by O(1).
TEST_F(MlpModelTest, EveryRowOfABatchMatchesTheRowComputedAlone) {
  WriteLayers({784, 512, 512, 10});
  constexpr int kMaxBatch = 16;
  for (const std::string& output : {std::string("none"), std::string("softmax")}) {
    auto instance = Instance(Spec(784, 10, kMaxBatch, {{"output_activation", output}}));
    ASSERT_NE(instance, nullptr);
    const std::vector<float> x = RandomFloats(rng_, kMaxBatch * 784, 1.f);
    const std::vector<float> batched = RunRows(*instance, x, kMaxBatch, 784);
    ASSERT_EQ(batched.size(), kMaxBatch * 10u);
    for (int r = 0; r < kMaxBatch; ++r) {
      const std::vector<float> row(x.begin() + r * 784, x.begin() + (r + 1) * 784);
      const std::vector<float> alone = RunRows(*instance, row, 1, 784);
      ASSERT_EQ(alone.size(), 10u);
      const std::vector<double> alone_as_double(alone.begin(), alone.end());
      const std::vector<float> batched_row(batched.begin() + r * 10,
                                           batched.begin() + (r + 1) * 10);
      EXPECT_LT(MaxRowRelativeError(batched_row, alone_as_double, 1), 5e-6)
          << "row " << r << ", output " << output;
    }
  }
}

TEST_F(MlpModelTest, EveryActivationMatchesTheReference) {
  const std::vector<LayerData> layers = WriteLayers({20, 16, 12, 5});
  for (const std::string hidden :
       {"none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"}) {
    for (const std::string& output :
         std::vector<std::string>{"none", "softmax", "sigmoid", hidden}) {
      const std::vector<std::string> activations = {hidden, "tanh", output};
      auto instance = Instance(Spec(20, 5, 8, {{"activations", absl::StrJoin(activations, ",")}}));
      ASSERT_NE(instance, nullptr);
      const std::vector<float> x = RandomFloats(rng_, 8 * 20, 2.f);
      const std::vector<float> y = RunRows(*instance, x, 8, 20);
      EXPECT_LT(MaxRowRelativeError(y, Reference(layers, activations, x, 8), 8), 1e-5)
          << absl::StrJoin(activations, ",");
    }
  }
}

TEST_F(MlpModelTest, ActivationAndOutputActivationParameters) {
  const std::vector<LayerData> layers = WriteLayers({12, 9, 9, 4});
  auto instance =
      Instance(Spec(12, 4, 4, {{"activation", "silu"}, {"output_activation", "softmax"}}));
  ASSERT_NE(instance, nullptr);
  const std::vector<float> x = RandomFloats(rng_, 4 * 12, 1.f);
  const std::vector<float> y = RunRows(*instance, x, 4, 12);
  EXPECT_LT(MaxRowRelativeError(y, Reference(layers, {"silu", "silu", "softmax"}, x, 4), 4), 1e-5);
  for (int r = 0; r < 4; ++r) {
    EXPECT_NEAR(y[r * 4] + y[r * 4 + 1] + y[r * 4 + 2] + y[r * 4 + 3], 1.f, 1e-6);
  }
}

// What a GPU backend reads from the network besides the FP32 values: the stored precision and
// whether TF32 is allowed.
TEST_F(MlpModelTest, NetworkKeepsTheStoredPrecisionAndTf32Choice) {
  for (DataType dtype : {DataType::kFp32, DataType::kFp16, DataType::kBf16}) {
    WriteLayers({16, 8, 4}, dtype);
    auto network = LoadMlpNetwork(Spec(16, 4));
    ASSERT_TRUE(network.ok()) << network.status();
    EXPECT_EQ((*network)->stored_dtype, dtype);
    EXPECT_FALSE((*network)->allow_tf32);
  }
  auto network = LoadMlpNetwork(Spec(16, 4, 16, {{"allow_tf32", "true"}}));
  ASSERT_TRUE(network.ok()) << network.status();
  EXPECT_TRUE((*network)->allow_tf32);
}

TEST_F(MlpModelTest, HalfAndBFloat16WeightsLoadAndCompute) {
  for (DataType dtype : {DataType::kFp16, DataType::kBf16}) {
    rng_.seed(99);
    const std::vector<LayerData> layers = WriteLayers({64, 32, 8}, dtype);
    auto instance = Instance(Spec(64, 8, 4, {{"output_activation", "tanh"}}));
    ASSERT_NE(instance, nullptr);
    const std::vector<float> x = RandomFloats(rng_, 4 * 64, 1.f);
    const std::vector<float> y = RunRows(*instance, x, 4, 64);
    // Exact conversion at load: against the rounded weights the FP32 bound holds.
    const std::vector<double> expected = Reference(layers, {"relu", "tanh"}, x, 4);
    EXPECT_LT(MaxRowRelativeError(y, expected, 4), 1e-5) << DataTypeName(dtype);
    // And the 16-bit storage costs only its rounding: compare with the network the weights were
    // drawn as (before rounding), within the format's precision.
    std::vector<LayerData> unrounded = layers;
    rng_.seed(99);
    for (LayerData& layer : unrounded) {
      const float bound = 1.f / std::sqrt(static_cast<float>(layer.in));
      layer.weight = RandomFloats(rng_, layer.weight.size(), bound);
      layer.bias = RandomFloats(rng_, layer.bias.size(), bound);
    }
    const double tolerance = dtype == DataType::kFp16 ? 5e-3 : 3e-2;
    EXPECT_LT(MaxRowRelativeError(y, Reference(unrounded, {"relu", "tanh"}, x, 4), 4), tolerance)
        << DataTypeName(dtype);
  }
}

TEST_F(MlpModelTest, LayersWithoutBiasAndNumericLayerOrder) {
  // Indices 0, 10, 20: a lexicographic order ("0", "10", "20") happens to agree, so use a step
  // that does not: 0, 9, 18 would sort "18" before "9" as text.
  const std::vector<LayerData> layers =
      WriteLayers({10, 7, 6, 3}, DataType::kFp32, /*bias=*/false, "model.safetensors",
                  /*index_step=*/9);
  auto instance = Instance(Spec(10, 3, 2));
  ASSERT_NE(instance, nullptr);
  const std::vector<float> x = RandomFloats(rng_, 2 * 10, 1.f);
  EXPECT_LT(MaxRowRelativeError(RunRows(*instance, x, 2, 10),
                                Reference(layers, {"relu", "relu", "none"}, x, 2), 2),
            1e-5);
}

TEST_F(MlpModelTest, MisalignedInputBytesAreRead) {
  const std::vector<LayerData> layers = WriteLayers({8, 4, 2});
  auto instance = Instance(Spec(8, 2, 3));
  ASSERT_NE(instance, nullptr);
  const std::vector<float> x = RandomFloats(rng_, 3 * 8, 1.f);
  const std::vector<float> aligned = RunRows(*instance, x, 3, 8);
  const std::vector<float> shifted = RunRows(*instance, x, 3, 8, /*misalign=*/1);
  EXPECT_EQ(aligned, shifted);
  EXPECT_LT(MaxRowRelativeError(aligned, Reference(layers, {"relu", "none"}, x, 3), 3), 1e-5);
}

TEST_F(MlpModelTest, WeightsFileParameter) {
  const std::vector<LayerData> layers =
      WriteLayers({6, 5, 4}, DataType::kFp32, true, "other.safetensors");
  auto instance = Instance(Spec(6, 4, 2, {{"weights_file", "other.safetensors"}}));
  ASSERT_NE(instance, nullptr);
  const std::vector<float> x = RandomFloats(rng_, 2 * 6, 1.f);
  EXPECT_LT(MaxRowRelativeError(RunRows(*instance, x, 2, 6),
                                Reference(layers, {"relu", "none"}, x, 2), 2),
            1e-5);
}

TEST_F(MlpModelTest, InstancesShareWeightsAndRunConcurrently) {
  const std::vector<LayerData> layers = WriteLayers({128, 64, 64, 10});
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(Spec(128, 10, 8));
  ASSERT_TRUE(model.ok()) << model.status();
  constexpr int kInstances = 3;
  std::vector<std::unique_ptr<ModelInstance>> instances;
  for (int i = 0; i < kInstances; ++i) instances.push_back((*model)->CreateInstance(i).value());
  std::vector<std::vector<float>> inputs;
  for (int i = 0; i < kInstances; ++i) inputs.push_back(RandomFloats(rng_, 8 * 128, 1.f));
  std::vector<double> errors(kInstances, 1.0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kInstances; ++i) {
    threads.emplace_back([&, i] {
      double worst = 0;
      for (int repeat = 0; repeat < 50; ++repeat) {
        const std::vector<float> y = RunRows(*instances[i], inputs[i], 8, 128);
        worst = std::max(
            worst,
            MaxRowRelativeError(y, Reference(layers, {"relu", "relu", "none"}, inputs[i], 8), 8));
      }
      errors[i] = worst;
    });
  }
  for (auto& thread : threads) thread.join();
  for (int i = 0; i < kInstances; ++i) EXPECT_LT(errors[i], 1e-5) << "instance " << i;
}

// --- Config and weights checked against each other -------------------------------------------

TEST_F(MlpModelTest, InputFeaturesMismatchNamesBothSides) {
  WriteLayers({784, 16, 10});
  EXPECT_THAT(LoadError(Spec(785, 10)),
              HasSubstr("config input 'INPUT0' has 785 features but layer '0.weight' (shape "
                        "[16,784]) expects 784"));
}

TEST_F(MlpModelTest, OutputFeaturesMismatchNamesBothSides) {
  WriteLayers({8, 16, 10});
  EXPECT_THAT(LoadError(Spec(8, 11)),
              HasSubstr("config output 'OUTPUT0' has 11 features but the last layer '2.weight' "
                        "(shape [10,16]) gives 10"));
}

TEST_F(MlpModelTest, BrokenLayerChainNamesBothLayers) {
  std::vector<LayerData> layers = WriteLayers({8, 16, 10});
  layers[1].in = 15;
  layers[1].weight.resize(10 * 15);
  WriteFile(layers, DataType::kFp32);
  EXPECT_THAT(LoadError(Spec(8, 10)),
              HasSubstr("layer '2.weight' (shape [10,15]) expects 15 inputs but the layer before "
                        "it, '0.weight' (shape [16,8]), gives 16"));
}

TEST_F(MlpModelTest, BiasOfTheWrongSize) {
  std::vector<LayerData> layers = WriteLayers({8, 16, 10});
  layers[0].bias.resize(15);
  WriteFile(layers, DataType::kFp32);
  EXPECT_THAT(LoadError(Spec(8, 10)),
              HasSubstr("tensor '0.bias' has shape [15] but '0.weight' [16,8] needs a bias of "
                        "[16]"));
}

TEST_F(MlpModelTest, TensorsThatAreNotLayerParameters) {
  for (const std::string name : {"classifier.weight", "0.running_mean", "01.weight", "-1.bias"}) {
    const std::vector<std::byte> data = Encode({1.f, 2.f}, DataType::kFp32);
    const std::vector<TensorView> tensors = {{name, DataType::kFp32, {2}, data}};
    ASSERT_TRUE(WriteSafetensorsFile((dir_ / "1" / "model.safetensors").string(), tensors).ok());
    EXPECT_THAT(LoadError(Spec(2, 2)),
                AllOf(HasSubstr(absl::StrCat("tensor '", name, "' is not a Linear layer")),
                      HasSubstr("model.safetensors")));
  }
  const std::vector<std::byte> data = Encode({1.f, 2.f}, DataType::kFp32);
  const std::vector<TensorView> bias_only = {{"0.bias", DataType::kFp32, {2}, data}};
  ASSERT_TRUE(WriteSafetensorsFile((dir_ / "1" / "model.safetensors").string(), bias_only).ok());
  EXPECT_THAT(LoadError(Spec(2, 2)), HasSubstr("layer 0 has '0.bias' but no '0.weight'"));
  ASSERT_TRUE(WriteSafetensorsFile((dir_ / "1" / "model.safetensors").string(), {}).ok());
  EXPECT_THAT(LoadError(Spec(2, 2)), HasSubstr("holds no layers"));
}

TEST_F(MlpModelTest, WeightsOfANonFloatTypeOrWrongRank) {
  const std::vector<std::byte> ints = Encode({1.f, 2.f, 3.f, 4.f}, DataType::kFp32);
  std::vector<TensorView> tensors = {{"0.weight", DataType::kInt32, {2, 2}, ints}};
  ASSERT_TRUE(WriteSafetensorsFile((dir_ / "1" / "model.safetensors").string(), tensors).ok());
  EXPECT_THAT(LoadError(Spec(2, 2)),
              HasSubstr("tensor '0.weight': dtype I32 is not a floating-point type"));
  tensors = {{"0.weight", DataType::kFp32, {4}, ints}};
  ASSERT_TRUE(WriteSafetensorsFile((dir_ / "1" / "model.safetensors").string(), tensors).ok());
  EXPECT_THAT(LoadError(Spec(2, 2)),
              HasSubstr("tensor '0.weight' has shape [4]; a Linear weight is [out_features, "
                        "in_features]"));
}

TEST_F(MlpModelTest, MissingWeightsFileIsNotFound) {
  EXPECT_THAT(LoadError(Spec(8, 10), absl::StatusCode::kNotFound),
              AllOf(HasSubstr("model.safetensors"), HasSubstr("does not exist")));
}

TEST_F(MlpModelTest, CorruptAndTruncatedWeightsFiles) {
  WriteLayers({8, 16, 10});
  const std::string path = (dir_ / "1" / "model.safetensors").string();
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  EXPECT_THAT(LoadError(Spec(8, 10)), AllOf(HasSubstr(path), HasSubstr("beyond the data section")));
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      << std::string("\x10\0\0\0\0\0\0\0", 8) << "{not json at all";
  EXPECT_THAT(LoadError(Spec(8, 10)), HasSubstr("header is not valid JSON"));
}

TEST_F(MlpModelTest, WeightsFileMustStayInTheVersionFolder) {
  WriteLayers({8, 16, 10});
  for (const std::string name :
       {"../model.safetensors", "..", ".", "sub/model.safetensors", "/etc/passwd", ""}) {
    EXPECT_THAT(LoadError(Spec(8, 10, 4, {{"weights_file", name}})),
                HasSubstr("parameter 'weights_file'"))
        << name;
  }
}

TEST_F(MlpModelTest, ConfigShapeErrors) {
  WriteLayers({8, 16, 10});
  ModelSpec no_batch = Spec(8, 10, 0);
  EXPECT_THAT(LoadError(no_batch), HasSubstr("max_batch_size must be > 0"));
  ModelSpec int_input = Spec(8, 10);
  int_input.config.inputs[0].dtype = DataType::kInt32;
  EXPECT_THAT(LoadError(int_input), HasSubstr("input 'INPUT0' must be TYPE_FP32, not INT32"));
  ModelSpec variable = Spec(8, 10);
  variable.config.outputs[0].dims = {-1};
  EXPECT_THAT(LoadError(variable),
              HasSubstr("output 'OUTPUT0' has dims [-1]; the mlp backend needs one fixed size"));
  ModelSpec two_inputs = Spec(8, 10);
  two_inputs.config.inputs.push_back({"INPUT1", DataType::kFp32, {8}});
  EXPECT_THAT(LoadError(two_inputs), HasSubstr("needs exactly 1 input and 1 output, not 2 and 1"));
}

TEST_F(MlpModelTest, ActivationParameterErrorsNameTheParameter) {
  WriteLayers({8, 16, 16, 10});  // three layers: 0, 2, 4
  EXPECT_THAT(LoadError(Spec(8, 10, 4, {{"activation", "relux"}})),
              HasSubstr("parameter 'activation': unknown activation 'relux' (known: none, relu"));
  EXPECT_THAT(LoadError(Spec(8, 10, 4, {{"output_activation", "max"}})),
              HasSubstr("parameter 'output_activation': unknown activation 'max'"));
  EXPECT_THAT(LoadError(Spec(8, 10, 4, {{"activation", "softmax"}})),
              HasSubstr("parameter 'activation': softmax is only allowed on the last layer"));
  EXPECT_THAT(LoadError(Spec(8, 10, 4, {{"activations", "relu,relu"}})),
              HasSubstr("parameter 'activations' = 'relu,relu' lists 2 activations but the weights "
                        "have 3 layers (0, 2, 4)"));
  EXPECT_THAT(LoadError(Spec(8, 10, 4, {{"activations", "relu,softmax,none"}})),
              HasSubstr("softmax is only allowed on the last layer, not on layer '2' (entry 2 of "
                        "3)"));
  EXPECT_THAT(LoadError(Spec(8, 10, 4, {{"activations", "relu, tanh ,bogus"}})),
              HasSubstr("parameter 'activations': unknown activation 'bogus'"));
  EXPECT_THAT(
      LoadError(Spec(8, 10, 4, {{"activations", "relu,relu,none"}, {"activation", "relu"}})),
      HasSubstr("parameters 'activations' and 'activation' are both set"));
  EXPECT_THAT(LoadError(Spec(8, 10, 4, {{"dropout", "0.1"}})),
              HasSubstr("unknown parameter 'dropout' (known: weights_file, activation, "
                        "output_activation, activations, allow_tf32)"));
  EXPECT_THAT(LoadError(Spec(8, 10, 4, {{"allow_tf32", "yes"}})),
              HasSubstr("parameter 'allow_tf32' = 'yes' must be \"true\" or \"false\""));
  // Spaces around the names in the list are allowed.
  EXPECT_TRUE(CreateModel(Spec(8, 10, 4, {{"activations", "relu, tanh , softmax"}})).ok());
}

// --- Through the engine ------------------------------------------------------------------------

TEST_F(MlpModelTest, EngineServesWithSeveralInstancesUnderConcurrentLoad) {
  const std::vector<LayerData> layers = WriteLayers({32, 24, 6});
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(EngineOptions{});
  ASSERT_TRUE(engine.ok());
  ModelSpec spec = Spec(32, 6, 8, {{"output_activation", "softmax"}});
  spec.config.instance_count = 2;
  spec.config.dynamic_batching = DynamicBatchingConfig{};
  spec.config.dynamic_batching->max_queue_delay = std::chrono::microseconds(200);
  ASSERT_TRUE((*engine)->LoadModel(spec).ok());
  ASSERT_TRUE((*engine)->IsModelReady("mlp_test", 1));

  constexpr int kThreads = 4;
  constexpr int kRequestsPerThread = 40;
  std::atomic<int> wrong{0};
  std::atomic<int> answered{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < kRequestsPerThread; ++i) {
        const int rows = 1 + static_cast<int>(rng() % 3);
        auto input = std::make_shared<std::vector<float>>(RandomFloats(rng, rows * 32, 1.f));
        std::mutex mu;
        std::condition_variable cv;
        bool done = false;
        auto request = std::make_unique<InferenceRequest>(
            "mlp_test", -1, [&](absl::StatusOr<InferenceResponse> result) {
              bool good = result.ok() && result->outputs.size() == 1;
              if (good) {
                std::vector<float> y(result->outputs[0].data.size() / 4);
                std::memcpy(y.data(), result->outputs[0].data.data(), y.size() * 4);
                good = y.size() == static_cast<size_t>(rows) * 6 &&
                       MaxRowRelativeError(y, Reference(layers, {"relu", "softmax"}, *input, rows),
                                           rows) < 1e-5;
              }
              if (!good) wrong++;
              answered++;
              std::lock_guard<std::mutex> lock(mu);
              done = true;
              cv.notify_one();
            });
        request->inputs.push_back(
            TensorView{"INPUT0",
                       DataType::kFp32,
                       {rows, 32},
                       {reinterpret_cast<const std::byte*>(input->data()), input->size() * 4}});
        request->keepalive = input;
        request->received_time = std::chrono::steady_clock::now();
        (*engine)->Submit(std::move(request));
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return done; });
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(answered.load(), kThreads * kRequestsPerThread);
  EXPECT_EQ(wrong.load(), 0);
  (*engine)->Shutdown();
}

TEST_F(MlpModelTest, EngineRecordsTheLoadErrorAndKeepsOtherModels) {
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(EngineOptions{});
  ASSERT_TRUE(engine.ok());
  WriteLayers({8, 4});
  ASSERT_TRUE((*engine)->LoadModel(Spec(8, 4, 2)).ok());
  ModelSpec broken = Spec(9, 4, 2);
  broken.config.name = "broken";
  EXPECT_EQ((*engine)->LoadModel(broken).code(), absl::StatusCode::kInvalidArgument);
  bool found = false;
  for (const ModelVersionStatus& status : (*engine)->ListModels()) {
    if (status.name == "broken") {
      found = true;
      EXPECT_EQ(status.state, ModelState::kUnavailable);
      EXPECT_THAT(status.reason, HasSubstr("config input 'INPUT0' has 9 features"));
    }
  }
  EXPECT_TRUE(found);
  EXPECT_TRUE((*engine)->IsModelReady("mlp_test", 1));
}

}  // namespace
}  // namespace sluice::engine::models
