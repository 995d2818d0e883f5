#include "engine/models/dense.h"

#include <cmath>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::engine::cpu {
namespace {

using ::testing::HasSubstr;

double Reference(Activation activation, double x) {
  switch (activation) {
    case Activation::kRelu:
      return x > 0 ? x : 0;
    case Activation::kGelu:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::kGeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::kSilu:
      return x / (1 + std::exp(-x));
    case Activation::kSigmoid:
      return 1 / (1 + std::exp(-x));
    case Activation::kTanh:
      return std::tanh(x);
    default:
      return x;
  }
}

TEST(DenseTest, ActivationNamesRoundTrip) {
  for (const std::string& name : ActivationNames()) {
    absl::StatusOr<Activation> activation = ParseActivation(name);
    ASSERT_TRUE(activation.ok()) << name;
    EXPECT_EQ(ActivationName(*activation), name);
  }
  absl::StatusOr<Activation> unknown = ParseActivation("ReLU");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.status().message()),
              HasSubstr("unknown activation 'ReLU' (known: none, relu, gelu, gelu_tanh"));
}

TEST(DenseTest, ElementwiseActivationsMatchTheirDefinitions) {
  const std::vector<float> points = {-30.f, -6.f, -2.5f, -1.f, -0.1f, 0.f,
                                     0.3f,  1.f,  2.f,   7.f,  30.f};
  for (Activation activation :
       {Activation::kNone, Activation::kRelu, Activation::kGelu, Activation::kGeluTanh,
        Activation::kSilu, Activation::kSigmoid, Activation::kTanh}) {
    std::vector<float> values = points;
    const std::vector<float> bias(values.size(), 0.25f);
    BiasActivation(values, 1, static_cast<int>(values.size()), bias, activation);
    for (size_t i = 0; i < points.size(); ++i) {
      const double expected = Reference(activation, static_cast<double>(points[i]) + 0.25);
      EXPECT_NEAR(values[i], expected, 2e-6 * std::max(1.0, std::fabs(expected)))
          << ActivationName(activation) << " at " << points[i];
    }
  }
}

TEST(DenseTest, SoftmaxRowsSumToOneAndSurviveLargeValues) {
  // Two rows; the second would overflow exp() without subtracting the row maximum.
  std::vector<float> values = {1.f, 2.f, 3.f, 1000.f, 1001.f, 1002.f};
  BiasActivation(values, 2, 3, {}, Activation::kSoftmax);
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0);
  const double sum = 1 + e1 + e2;
  for (int row = 0; row < 2; ++row) {
    EXPECT_NEAR(values[row * 3 + 0], e2 / sum, 1e-7);
    EXPECT_NEAR(values[row * 3 + 1], e1 / sum, 1e-7);
    EXPECT_NEAR(values[row * 3 + 2], 1 / sum, 1e-7);
  }
}

TEST(DenseTest, NoBiasNoActivationLeavesValues) {
  std::vector<float> values = {1.f, -2.f, 3.f, -4.f};
  BiasActivation(values, 2, 2, {}, Activation::kNone);
  EXPECT_THAT(values, ::testing::ElementsAre(1.f, -2.f, 3.f, -4.f));
  BiasActivation(values, 2, 2, {}, Activation::kRelu);
  EXPECT_THAT(values, ::testing::ElementsAre(1.f, 0.f, 3.f, 0.f));
}

TEST(DenseTest, ReluKeepsNaN) {
  std::vector<float> values = {std::nanf("")};
  BiasActivation(values, 1, 1, {}, Activation::kRelu);
  EXPECT_TRUE(std::isnan(values[0]));
}

TEST(DenseTest, ForwardMatchesFloat64Reference) {
  UseSingleThreadedBlas();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (bool with_bias : {true, false}) {
    DenseLayer layer;
    layer.name = "0";
    layer.in_features = 37;
    layer.out_features = 19;
    layer.activation = Activation::kTanh;
    layer.weight.resize(37 * 19);
    for (float& w : layer.weight) w = dist(rng);
    if (with_bias) {
      layer.bias.resize(19);
      for (float& b : layer.bias) b = dist(rng);
    }
    const int rows = 5;
    std::vector<float> input(rows * 37);
    for (float& x : input) x = dist(rng);
    std::vector<float> output(rows * 19);
    DenseForward(layer, input.data(), rows, output.data());
    for (int r = 0; r < rows; ++r) {
      for (int o = 0; o < 19; ++o) {
        double sum = with_bias ? layer.bias[o] : 0.0;
        for (int i = 0; i < 37; ++i) {
          sum += static_cast<double>(input[r * 37 + i]) * layer.weight[o * 37 + i];
        }
        EXPECT_NEAR(output[r * 19 + o], std::tanh(sum), 1e-5) << r << "," << o;
      }
    }
  }
}

TEST(DenseTest, SgemmComputesATimesBTransposed) {
  // A = [[1, 2], [3, 4], [5, 6]] (3x2), B = [[1, 0], [0, 1], [1, 1], [2, -1]] (4x2).
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<float> b = {1, 0, 0, 1, 1, 1, 2, -1};
  std::vector<float> c(12);
  Sgemm(a.data(), b.data(), 3, 4, 2, c.data());
  EXPECT_THAT(c, ::testing::ElementsAre(1, 2, 3, 0, 3, 4, 7, 2, 5, 6, 11, 4));
}

}  // namespace
}  // namespace sluice::engine::cpu
