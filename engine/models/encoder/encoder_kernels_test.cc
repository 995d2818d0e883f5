// The encoder's element-wise kernels against double-precision references (std::erf, std::exp in
// double, LayerNorm and softmax in double), for every kernel table this machine can run (the
// generic one always; AVX2 + FMA where the CPU has it). The bounds are the ones
// encoder_kernels.h documents.

#include "engine/models/encoder/encoder_kernels.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::engine::models::encoder::kernels {
namespace {

std::vector<const KernelTable*> Tables() {
  std::vector<const KernelTable*> tables = {&Generic()};
  if (Avx2Fma() != nullptr) tables.push_back(Avx2Fma());
  if (Avx512() != nullptr) tables.push_back(Avx512());
  return tables;
}

// Every float in [lo, hi] at a step of `step`, plus the interval's ends.
std::vector<float> Grid(double lo, double hi, double step) {
  std::vector<float> values;
  for (double x = lo; x <= hi; x += step) values.push_back(static_cast<float>(x));
  values.push_back(static_cast<float>(hi));
  return values;
}

double GeluErf(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

// Without SLUICE_ENCODER_KERNELS the widest table; with it, the one it names where the CPU has it.
TEST(EncoderKernelsTest, GetPicksTheWidestTableOrTheForcedOne) {
  EXPECT_STREQ(Generic().name, "generic");
  std::string expected = Avx512() ? "avx512f" : Avx2Fma() ? "avx2-fma" : "generic";
  if (const char* forced = std::getenv("SLUICE_ENCODER_KERNELS"); forced != nullptr) {
    for (const KernelTable* table : Tables()) {
      if (std::string(forced) == table->name) expected = table->name;
    }
  }
  EXPECT_EQ(Get().name, expected);
}

TEST(EncoderKernelsTest, ErfWithinDocumentedBound) {
  const std::vector<float> in = Grid(-12.0, 12.0, 1.0 / 65536);
  for (const KernelTable* table : Tables()) {
    std::vector<float> out(in.size());
    table->erf(in.data(), out.data(), static_cast<int64_t>(in.size()));
    double worst = 0;
    float worst_at = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const double error = std::fabs(out[i] - std::erf(static_cast<double>(in[i])));
      if (error > worst) {
        worst = error;
        worst_at = in[i];
      }
    }
    EXPECT_LE(worst, 1.5e-7) << table->name << " at " << worst_at;
    // Odd, exact at 0, saturated far out.
    float edge_in[] = {0.0f, 30.0f, -30.0f, std::numeric_limits<float>::infinity()};
    float edge_out[4];
    table->erf(edge_in, edge_out, 4);
    EXPECT_EQ(edge_out[0], 0.0f) << table->name;
    EXPECT_EQ(edge_out[1], 1.0f) << table->name;
    EXPECT_EQ(edge_out[2], -1.0f) << table->name;
    EXPECT_EQ(edge_out[3], 1.0f) << table->name;
  }
}

TEST(EncoderKernelsTest, ExpWithinDocumentedBoundAndZeroBelowTheNormalRange) {
  const std::vector<float> in = Grid(-87.3, 88.0, 1.0 / 4096);
  for (const KernelTable* table : Tables()) {
    std::vector<float> out(in.size());
    table->exp(in.data(), out.data(), static_cast<int64_t>(in.size()));
    double worst = 0;
    float worst_at = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const double exact = std::exp(static_cast<double>(in[i]));
      const double error = std::fabs(out[i] - exact) / exact;
      if (error > worst) {
        worst = error;
        worst_at = in[i];
      }
    }
    EXPECT_LE(worst, 3e-7) << table->name << " at " << worst_at;
    float edge_in[] = {0.0f, -87.4f, -1000.0f, -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN()};
    float edge_out[5];
    table->exp(edge_in, edge_out, 5);
    EXPECT_EQ(edge_out[0], 1.0f) << table->name;
    EXPECT_EQ(edge_out[1], 0.0f) << table->name;
    EXPECT_EQ(edge_out[2], 0.0f) << table->name;
    EXPECT_EQ(edge_out[3], 0.0f) << table->name;
    EXPECT_TRUE(std::isnan(edge_out[4])) << table->name << ": NaN in, NaN out";
  }
}

TEST(EncoderKernelsTest, GeluErfRelativeErrorSmallEvenWhereOnePlusErfIsTiny) {
  // Bias folded in: the kernel adds it before the activation.
  const std::vector<float> x = Grid(-12.0, 12.0, 1.0 / 4096);
  const int width = 7;  // odd: the vector loop's tail runs too
  const int64_t rows = static_cast<int64_t>(x.size()) / width;
  std::vector<float> bias = {0.5f, -0.25f, 0.0f, 1.0f, -1.0f, 0.125f, 2.0f};
  for (const KernelTable* table : Tables()) {
    std::vector<float> values(x.begin(), x.begin() + rows * width);
    table->bias_activate(values.data(), bias.data(), rows, width, HiddenActivation::kGeluErf);
    // Relative error, scaled by the condition of exp(-x^2/2) where x is large and negative: the
    // float rounding of x^2 alone moves GELU(-8) by ~1e-5 relative (torch returns 0 there).
    double worst = 0;
    double worst_at = 0;
    for (int64_t i = 0; i < rows * width; ++i) {
      const float input = x[i] + bias[i % width];
      const double exact = GeluErf(input);
      if (std::fabs(exact) < 1e-30) continue;
      const double condition = input < -1.0f ? 0.5 * double{input} * input : 1.0;
      const double error = std::fabs(values[i] - exact) / std::fabs(exact) / condition;
      if (error > worst) {
        worst = error;
        worst_at = input;
      }
    }
    EXPECT_LE(worst, 1e-6) << table->name << " at " << worst_at;
  }
}

TEST(EncoderKernelsTest, GeluTanhAndReluMatchTheirFormulas) {
  const std::vector<float> x = Grid(-12.0, 12.0, 1.0 / 1024);
  const int64_t n = static_cast<int64_t>(x.size());
  const std::vector<float> zero(static_cast<size_t>(n), 0.0f);
  for (const KernelTable* table : Tables()) {
    std::vector<float> tanh_form = x;
    table->bias_activate(tanh_form.data(), zero.data(), 1, static_cast<int>(n),
                         HiddenActivation::kGeluTanh);
    std::vector<float> relu = x;
    table->bias_activate(relu.data(), zero.data(), 1, static_cast<int>(n), HiddenActivation::kRelu);
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i];
      const double exact =
          0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
      ASSERT_NEAR(tanh_form[i], exact, 1e-6 * std::max(1.0, std::fabs(exact)))
          << table->name << " at " << v;
      ASSERT_EQ(relu[i], v > 0 ? x[i] : 0.0f) << table->name;
    }
  }
}

TEST(EncoderKernelsTest, MaskedSoftmaxGivesMaskedKeysZeroAndMatchesDouble) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  // 1/sqrt(32): MiniLM's head size, a scale that is not a power of two.
  for (float scale : {1.0f, 0.125f, 0.17677669f}) {
    for (int n : {1, 2, 7, 16, 17, 33, 128, 130}) {
      std::vector<float> mask_add(static_cast<size_t>(n), 0.0f);
      for (int j = 1; j < n; j += 3) mask_add[j] = -std::numeric_limits<float>::infinity();
      const int rows = 5;
      std::vector<float> scores(static_cast<size_t>(rows) * n);
      for (float& s : scores) s = normal(rng);
      for (const KernelTable* table : Tables()) {
        std::vector<float> out = scores;
        table->masked_softmax(out.data(), mask_add.data(), rows, n, scale);
        for (int i = 0; i < rows; ++i) {
          const float* in = scores.data() + static_cast<int64_t>(i) * n;
          double max = -1e300;
          for (int j = 0; j < n; ++j) {
            if (mask_add[j] == 0) max = std::max(max, double{scale} * in[j]);
          }
          double sum = 0;
          for (int j = 0; j < n; ++j) {
            sum += mask_add[j] == 0 ? std::exp(double{scale} * in[j] - max) : 0.0;
          }
          for (int j = 0; j < n; ++j) {
            const float got = out[static_cast<int64_t>(i) * n + j];
            if (mask_add[j] != 0) {
              ASSERT_EQ(got, 0.0f) << table->name << " n " << n;
              continue;
            }
            const double exact = std::exp(double{scale} * in[j] - max) / sum;
            ASSERT_NEAR(got, exact, 2e-6 * exact + 1e-12)
                << table->name << " n " << n << " j " << j << " scale " << scale;
          }
        }
      }
    }
  }
}

TEST(EncoderKernelsTest, BiasResidualLayerNormMatchesDouble) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int width : {384, 37}) {
    const int64_t rows = 4;
    std::vector<float> x(static_cast<size_t>(rows * width)), y(x.size());
    std::vector<float> bias(static_cast<size_t>(width)), gamma(bias.size()), beta(bias.size());
    for (float& v : x) v = 50.0f + normal(rng);  // a large mean: the two-pass variance matters
    for (float& v : y) v = normal(rng);
    for (float& v : bias) v = normal(rng);
    for (float& v : gamma) v = 1.0f + 0.1f * normal(rng);
    for (float& v : beta) v = normal(rng);
    for (const KernelTable* table : Tables()) {
      std::vector<float> out = x;
      table->bias_residual_layer_norm(y.data(), bias.data(), gamma.data(), beta.data(), rows, width,
                                      1e-12f, out.data());
      std::vector<float> plain(x.size());
      for (size_t i = 0; i < x.size(); ++i) plain[i] = x[i] + y[i] + bias[i % width];
      table->layer_norm(plain.data(), gamma.data(), beta.data(), rows, width, 1e-12f);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<double> sum(static_cast<size_t>(width));
        double mean = 0;
        for (int j = 0; j < width; ++j) {
          const int64_t i = r * width + j;
          sum[j] = static_cast<double>(x[i]) + y[i] + bias[j];
          mean += sum[j];
        }
        mean /= width;
        double variance = 0;
        for (double v : sum) variance += (v - mean) * (v - mean);
        variance /= width;
        for (int j = 0; j < width; ++j) {
          const double exact = (sum[j] - mean) / std::sqrt(variance + 1e-12) * gamma[j] + beta[j];
          ASSERT_NEAR(out[r * width + j], exact, 2e-5) << table->name << " width " << width;
          ASSERT_NEAR(plain[r * width + j], exact, 2e-5) << table->name << " width " << width;
        }
      }
    }
  }
}

}  // namespace
}  // namespace sluice::engine::models::encoder::kernels
