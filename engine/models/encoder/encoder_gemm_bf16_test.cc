// The encoder's BF16 GEMM (encoder_gemm.h: WeightFormat::kBf16, encoder_gemm_bf16.cc) against a
// double-precision product: of the BF16-rounded inputs within the FP32 summation bound (the GEMM
// must add exactly those products), and of the FP32 inputs within BF16's rounding of both
// operands. Ragged shapes: M of 1, 7 (< one 8-row tile), 33 and 200 (> one 192-row block); N of
// 1, 17, 33 and 47 (odd, partial panels and panel pairs); K of 1, 31, 33 (odd: a zero-padded
// pair), 257 and 600 (several K blocks). Skipped where the CPU lacks AVX512_BF16.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/core/compute_pool.h"
#include "engine/models/encoder/encoder_gemm.h"
#include "engine/models/encoder/encoder_gemm_amx.h"
#include "engine/models/encoder/encoder_gemm_test_support.h"
#include "engine/models/encoder/encoder_precision.h"
#include "gtest/gtest.h"

namespace sluice::engine::models::encoder {
namespace {

std::vector<float> Random(int64_t size, std::mt19937& rng) {
  return test_support::RandomNormal(size, rng);
}

std::vector<float> RoundedToBf16(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToFloat(RoundToBf16(v[i]));
  return out;
}

TEST(EncoderGemmBf16Test, RoundsToNearestEven) {
  EXPECT_EQ(RoundToBf16(1.0f), 0x3f80);
  EXPECT_EQ(RoundToBf16(-2.0f), 0xc000);
  EXPECT_EQ(RoundToBf16(0.0f), 0x0000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to the even one, 1.
  EXPECT_EQ(RoundToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(RoundToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  // Just above half: up.
  EXPECT_EQ(RoundToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(RoundToBf16(INFINITY), 0x7f80);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(RoundToBf16(NAN))));
  EXPECT_EQ(Bf16ToFloat(0x3fc0), 1.5f);
}

TEST(EncoderGemmBf16Test, PackHoldsTheRoundedValuesInHalfTheBytes) {
  std::mt19937 rng(3);
  for (const auto& [n, k] : {std::pair{21, 7}, std::pair{16, 32}, std::pair{33, 1}}) {
    const std::vector<float> w = Random(int64_t{n} * k, rng);
    const PackedWeights fp32 = PackedWeights::Pack(w, n, k);
    const PackedWeights bf16 = PackedWeights::Pack(w, n, k, WeightFormat::kBf16);
    EXPECT_EQ(bf16.format(), WeightFormat::kBf16);
    EXPECT_EQ(bf16.data(), nullptr);
    EXPECT_EQ(bf16.Unpack(), RoundedToBf16(w)) << n << "x" << k;
    // An even K is exactly half; an odd one pads each panel with one zero pair row's half.
    EXPECT_EQ(bf16.bytes(), int64_t{bf16.panels()} * ((k + 1) / 2) * 2 * kPanelWidth * 2);
    if (k % 2 == 0) {
      EXPECT_EQ(2 * bf16.bytes(), fp32.bytes());
    }
    // Padding (columns past n, the K pad) is zero: widening every value gives no NaN or garbage.
    const uint16_t* values = bf16.bf16_data();
    for (int panel = 0; panel < bf16.panels(); ++panel) {
      for (int q = 0; q < bf16.bf16_pairs(); ++q) {
        for (int c = 0; c < kPanelWidth; ++c) {
          for (int h = 0; h < 2; ++h) {
            const int row = panel * kPanelWidth + c;
            const int p = 2 * q + h;
            const uint16_t v =
                values[panel * bf16.bf16_panel_stride() + q * 2 * kPanelWidth + 2 * c + h];
            if (row >= n || p >= k) {
              EXPECT_EQ(v, 0) << "padding at row " << row << " k " << p;
            }
          }
        }
      }
    }
  }
}

// y against the double product of xr and wr, each element within `relative` of the sum of |terms|
// (plus the FP32 summation bound), where xr/wr are x/w rounded to BF16 (exact: the GEMM must add
// exactly those products) or x/w themselves (BF16 rounding of both operands: 2^-8 each).
int CountMismatches(const std::vector<float>& x, const std::vector<float>& w,
                    const std::vector<float>& bias, int64_t m, int n, int k,
                    const std::vector<float>& y, double relative, const std::string& what) {
  int failures = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = bias[j];
      double magnitude = std::abs(bias[j]);
      for (int p = 0; p < k; ++p) {
        const double term = double{x[i * k + p]} * w[int64_t{j} * k + p];
        sum += term;
        magnitude += std::abs(term);
      }
      const double bound = (relative + (k + 2) * std::ldexp(1.0, -24)) * magnitude;
      const double got = y[i * n + j];
      if (!(std::abs(got - sum) <= bound) && ++failures <= 5) {
        ADD_FAILURE() << what << ": y[" << i << "][" << j << "] = " << got << ", reference " << sum
                      << " (bound " << bound << ")";
      }
    }
  }
  return failures;
}

class EncoderGemmBf16ShapesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gemm::Bf16Supported()) GTEST_SKIP() << "this CPU has no AVX512_BF16 (or AVX-512BW/VL)";
  }
};

TEST_F(EncoderGemmBf16ShapesTest, MatchesTheProductOfTheRoundedInputsOnRaggedShapes) {
  std::mt19937 rng(11);
  for (int64_t m : {1, 7, 33, 200}) {
    for (int n : {1, 17, 33, 47}) {
      for (int k : {1, 31, 33, 257, 600}) {
        const std::vector<float> x = Random(m * k, rng);
        const std::vector<float> w = Random(int64_t{n} * k, rng);
        const std::vector<float> bias = Random(n, rng);
        const PackedWeights packed = PackedWeights::Pack(w, n, k, WeightFormat::kBf16);
        std::vector<float> y(static_cast<size_t>(m * n), NAN);
        PackedGemm(gemm::Get(), x.data(), m, packed, bias.data(), y.data());
        const std::string what =
            "M " + std::to_string(m) + " N " + std::to_string(n) + " K " + std::to_string(k);
        EXPECT_EQ(CountMismatches(RoundedToBf16(x), RoundedToBf16(w), bias, m, n, k, y, 0.0,
                                  what + " (rounded inputs)"),
                  0);
        // Against FP32: each product is off by at most (2^-8 + 2^-8 + 2^-16) of itself.
        EXPECT_EQ(CountMismatches(x, w, bias, m, n, k, y, 2.0 * std::ldexp(1.0, -8) * 1.01,
                                  what + " (FP32 inputs)"),
                  0);
      }
    }
  }
}

TEST_F(EncoderGemmBf16ShapesTest, WithoutBiasAndByRowsAloneGivesTheSameBits) {
  std::mt19937 rng(5);
  const int64_t m = 37;
  const int n = 65;
  const int k = 129;
  const std::vector<float> x = Random(m * k, rng);
  const std::vector<float> w = Random(int64_t{n} * k, rng);
  const PackedWeights packed = PackedWeights::Pack(w, n, k, WeightFormat::kBf16);
  std::vector<float> y(static_cast<size_t>(m * n));
  PackedGemm(gemm::Get(), x.data(), m, packed, nullptr, y.data());
  EXPECT_EQ(CountMismatches(RoundedToBf16(x), RoundedToBf16(w), std::vector<float>(n, 0.0f), m, n,
                            k, y, 0.0, "no bias"),
            0);
  // A row's result does not depend on its batch-mates.
  for (int64_t i : {int64_t{0}, int64_t{8}, m - 1}) {
    std::vector<float> alone(static_cast<size_t>(n));
    PackedGemm(gemm::Get(), x.data() + i * k, 1, packed, nullptr, alone.data());
    EXPECT_EQ(alone, std::vector<float>(y.begin() + i * n, y.begin() + (i + 1) * n)) << "row " << i;
  }
}

TEST_F(EncoderGemmBf16ShapesTest, APooledProductIsTheSingleThreadedProductBitForBit) {
  std::mt19937 rng(9);
  ComputePool pool(3);
  for (const auto& [m, n, k] :
       {std::tuple{int64_t{1}, 1152, 384}, std::tuple{int64_t{300}, 47, 257},
        std::tuple{int64_t{128}, 384, 1536}}) {
    const std::vector<float> x = Random(m * k, rng);
    const std::vector<float> w = Random(int64_t{n} * k, rng);
    const std::vector<float> bias = Random(n, rng);
    const PackedWeights packed = PackedWeights::Pack(w, n, k, WeightFormat::kBf16);
    std::vector<float> single(static_cast<size_t>(m * n)), pooled(single.size());
    PackedGemm(gemm::Get(), x.data(), m, packed, bias.data(), single.data());
    PackedGemm(&pool, gemm::Get(), x.data(), m, packed, bias.data(), pooled.data(), 0);
    EXPECT_EQ(pooled, single) << m << "x" << n << "x" << k;
  }
}

ModelConfig WithPrecision(const std::string& value) {
  ModelConfig config;
  if (!value.empty()) config.parameters[kPrecisionParam] = value;
  return config;
}

TEST(EncoderPrecisionTest, ParsesEachValue) {
  for (const bool has_bf16 : {false, true}) {
    auto absent = ParseCpuPrecision(WithPrecision(""), has_bf16, 2.0);
    ASSERT_TRUE(absent.ok());
    EXPECT_EQ(absent->format, WeightFormat::kFp32);
    EXPECT_EQ(absent->summary, "precision fp32 (the default)");
    auto fp32 = ParseCpuPrecision(WithPrecision("fp32"), has_bf16, 2.0);
    ASSERT_TRUE(fp32.ok());
    EXPECT_EQ(fp32->format, WeightFormat::kFp32);
    auto bad = ParseCpuPrecision(WithPrecision("BF16"), has_bf16, 2.0);
    EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
    EXPECT_EQ(bad.status().message(),
              "parameter 'precision' = 'BF16' must be one of fp32, bf16, int8, auto");
  }
}

// bf16's weights are BF16 on every CPU; its arithmetic is the CPU's: BF16 dot products where they
// outrun FP32 FMA, else the FP32 GEMM on the widened weights (kFp32HeldBf16).
TEST(EncoderPrecisionTest, Bf16TakesDotProductsOnlyWhereTheyAreFaster) {
  auto faster = ParseCpuPrecision(WithPrecision("bf16"), true, 1.96);
  ASSERT_TRUE(faster.ok());
  EXPECT_EQ(faster->format, WeightFormat::kBf16);
  EXPECT_EQ(faster->summary,
            "precision bf16 (from its config: BF16 weights and GEMM inputs, FP32 accumulation, on "
            "AVX512-BF16 dot products, which peak at 1.96x its FP32 FMA rate)");
  auto slower = ParseCpuPrecision(WithPrecision("bf16"), true, 0.497);
  ASSERT_TRUE(slower.ok());
  EXPECT_EQ(slower->format, WeightFormat::kFp32HeldBf16);
  EXPECT_EQ(slower->summary,
            "precision bf16 (from its config: BF16 weights, widened per panel into FP32 GEMMs, "
            "FP32 activations and accumulation: the CPU's BF16 dot product peaks at 0.50x its FP32 "
            "FMA rate, under 1.20x)");
  auto lacks = ParseCpuPrecision(WithPrecision("bf16"), false, 0.0);
  ASSERT_TRUE(lacks.ok());
  EXPECT_EQ(lacks->format, WeightFormat::kFp32HeldBf16);
  EXPECT_NE(lacks->summary.find(": the CPU lacks AVX512_BF16)"), std::string::npos)
      << lacks->summary;

  // SLUICE_ENCODER_BF16's two forcings (ParseCpuPrecision(config) reads it into CpuFeatures).
  auto dot = ParseCpuPrecision(
      WithPrecision("bf16"),
      CpuFeatures{.bf16 = true, .bf16_speedup = 0.5, .bf16_arithmetic = Bf16Arithmetic::kDot});
  ASSERT_TRUE(dot.ok());
  EXPECT_EQ(dot->format, WeightFormat::kBf16);
  EXPECT_NE(dot->summary.find("dot products, forced by SLUICE_ENCODER_BF16)"), std::string::npos)
      << dot->summary;
  auto widen = ParseCpuPrecision(
      WithPrecision("bf16"),
      CpuFeatures{.bf16 = true, .bf16_speedup = 2.0, .bf16_arithmetic = Bf16Arithmetic::kWiden});
  ASSERT_TRUE(widen.ok());
  EXPECT_EQ(widen->format, WeightFormat::kFp32HeldBf16);
  EXPECT_NE(widen->summary.find(": forced by SLUICE_ENCODER_BF16)"), std::string::npos)
      << widen->summary;
  // Where AMX runs the products, the log says so (the speedup is then TDPBF16PS's).
  auto amx = ParseCpuPrecision(WithPrecision("bf16"),
                               CpuFeatures{.bf16 = true, .bf16_speedup = 16.0, .amx_bf16 = true});
  ASSERT_TRUE(amx.ok());
  EXPECT_EQ(amx->format, WeightFormat::kBf16);
  EXPECT_NE(amx->summary.find("on AMX tiles (TDPBF16PS), which peak at 16.00x"), std::string::npos)
      << amx->summary;
  auto amx_int8 =
      ParseCpuPrecision(WithPrecision("auto"),
                        CpuFeatures{.int8_vnni = true, .int8_speedup = 30.0, .amx_int8 = true});
  ASSERT_TRUE(amx_int8.ok());
  EXPECT_NE(amx_int8->summary.find("the CPU has AMX-INT8, its TDPBUSD peaks at 30.00x"),
            std::string::npos)
      << amx_int8->summary;
  auto refused = ParseCpuPrecision(WithPrecision("bf16"),
                                   CpuFeatures{.bf16_arithmetic = Bf16Arithmetic::kDot});
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status()));
  EXPECT_NE(refused.status().message().find("SLUICE_ENCODER_BF16=dot needs a CPU with AVX512_BF16"),
            std::string::npos)
      << refused.status();
}

TEST(EncoderPrecisionTest, AutoTakesBf16OnlyWhereItIsFaster) {
  auto lacks = ParseCpuPrecision(WithPrecision("auto"), false, 0.0);
  ASSERT_TRUE(lacks.ok());
  EXPECT_EQ(lacks->format, WeightFormat::kFp32);
  EXPECT_EQ(lacks->summary, "precision fp32 (auto: the CPU lacks AVX512_BF16)");
  auto slower = ParseCpuPrecision(WithPrecision("auto"), true, 0.497);
  ASSERT_TRUE(slower.ok());
  EXPECT_EQ(slower->format, WeightFormat::kFp32);
  EXPECT_EQ(slower->summary,
            "precision fp32 (auto: the CPU has AVX512_BF16, but its BF16 dot product peaks at "
            "0.50x its FP32 FMA rate, under 1.20x)");
  auto faster = ParseCpuPrecision(WithPrecision("auto"), true, 1.96);
  ASSERT_TRUE(faster.ok());
  EXPECT_EQ(faster->format, WeightFormat::kBf16);
  EXPECT_NE(faster->summary.find("precision bf16 (auto: the CPU has AVX512_BF16, its BF16 dot "
                                 "product peaks at 1.96x"),
            std::string::npos)
      << faster->summary;
}

TEST(EncoderPrecisionTest, ParsesInt8AndAutoTriesInt8FirstWhereVnniIsFaster) {
  for (const bool forced : {false, true}) {
    auto int8 = ParseCpuPrecision(WithPrecision("int8"),
                                  CpuFeatures{.int8_vnni = true, .int8_generic_forced = forced});
    ASSERT_TRUE(int8.ok());
    EXPECT_EQ(int8->format, WeightFormat::kInt8);
    EXPECT_FALSE(int8->check_accuracy);
    EXPECT_NE(int8->summary.find(forced ? "generic kernel, forced by SLUICE_ENCODER_GEMM"
                                        : "AVX512-VNNI kernel)"),
              std::string::npos)
        << int8->summary;
  }
  auto refused = ParseCpuPrecision(WithPrecision("int8"), CpuFeatures{.bf16 = true});
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status()));
  EXPECT_NE(refused.status().message().find("'int8' needs a CPU with AVX512_VNNI"),
            std::string::npos)
      << refused.status();
  const CpuFeatures emerald{
      .bf16 = true, .bf16_speedup = 0.5, .int8_vnni = true, .int8_speedup = 3.9};
  auto chosen = ParseCpuPrecision(WithPrecision("auto"), emerald);
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->format, WeightFormat::kInt8);
  EXPECT_TRUE(chosen->check_accuracy);
  EXPECT_EQ(chosen->summary,
            "precision int8 (auto: the CPU has AVX512_VNNI, its VPDPBUSD peaks at 3.90x its FP32 "
            "FMA rate; INT8 weights per output channel, activations per token, INT32 "
            "accumulation)");
  // Where the probe fails: auto's choice without int8 (here fp32: BF16 is slower).
  EXPECT_EQ(chosen->fallback, WeightFormat::kFp32);
  EXPECT_EQ(chosen->fallback_summary,
            "precision fp32 (auto: the CPU has AVX512_BF16, but its BF16 dot product peaks at "
            "0.50x its FP32 FMA rate, under 1.20x)");
  CpuFeatures slow = emerald;
  slow.int8_speedup = 1.1;
  slow.bf16_speedup = 2.0;
  auto bf16 = ParseCpuPrecision(WithPrecision("auto"), slow);
  ASSERT_TRUE(bf16.ok());
  EXPECT_EQ(bf16->format, WeightFormat::kBf16);
  EXPECT_FALSE(bf16->check_accuracy);
}

TEST_F(EncoderGemmBf16ShapesTest, Bf16SpeedupIsMeasuredOnce) {
  const double speedup = gemm::Bf16Speedup();
  EXPECT_GT(speedup, 0.1);
  // Where AMX runs the product, TDPBF16PS's peak: 16x FMA's on Sapphire Rapids (1,024 / 64).
  EXPECT_LT(speedup, gemm::AmxBf16Enabled() ? 64.0 : 10.0);
  EXPECT_EQ(gemm::Bf16Speedup(), speedup);
  std::printf("BF16 dot product / FP32 FMA peak rate on this CPU: %.2fx\n", speedup);
}

}  // namespace
}  // namespace sluice::engine::models::encoder
