// The encoder's INT8 GEMM (encoder_gemm.h: WeightFormat::kInt8, encoder_gemm_int8.cc), each
// variant this build has: against the product of the quantized operands (the test quantizes them
// itself, by the documented rule: the int32 sum is exact, so only the FP32 epilogue's rounding is
// allowed), and against the FP32 product within the quantization error bound of each term. The
// variants give the same bits; a row's result does not depend on its batch-mates; a pooled
// product is the single-threaded one. The AVX512-VNNI and AMX variants are skipped, with the
// reason, where the CPU lacks them. Ragged shapes: M of 1, 7, 33 and 200 (> one 192-row block); N
// of 1, 17, 33, 47 (partial panels and pairs); K of 1, 3, 31 (padded quads), 257 and 600.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "engine/core/compute_pool.h"
#include "engine/models/encoder/encoder_gemm.h"
#include "engine/models/encoder/encoder_gemm_amx.h"
#include "engine/models/encoder/encoder_gemm_test_support.h"
#include "gtest/gtest.h"

namespace sluice::engine::models::encoder {
namespace {

std::vector<float> Random(int64_t size, std::mt19937& rng) {
  return test_support::RandomNormal(size, rng);
}

// Row-wise quantization as the GEMM documents it. Weights, symmetric: scale = max|row| / 127, q =
// round-to-nearest-even(v * (127 / max|row|)). Activations, asymmetric: [lo, hi] the row's range
// widened to hold 0, scale = (hi - lo) / 255, zero point round(-lo * 255 / (hi - lo)), u =
// clamp(round(v * 255 / (hi - lo)) + zero point, 0, 255); q = u - zero point.
struct Quantized {
  std::vector<int> q;
  std::vector<float> scale;
};
Quantized QuantizeActivations(const std::vector<float>& v, int64_t rows, int k) {
  Quantized out{std::vector<int>(v.size()), std::vector<float>(static_cast<size_t>(rows))};
  for (int64_t r = 0; r < rows; ++r) {
    float lo = 0.0f, hi = 0.0f;
    for (int p = 0; p < k; ++p) {
      lo = std::min(lo, v[r * k + p]);
      hi = std::max(hi, v[r * k + p]);
    }
    const float inv = hi - lo > 0.0f ? 255.0f / (hi - lo) : 0.0f;
    out.scale[r] = (hi - lo) / 255.0f;
    const int zp = static_cast<int>(std::clamp(std::nearbyint(-lo * inv), 0.0f, 255.0f));
    for (int p = 0; p < k; ++p) {
      const int u = static_cast<int>(std::nearbyint(v[r * k + p] * inv)) + zp;
      out.q[r * k + p] = std::clamp(u, 0, 255) - zp;
    }
  }
  return out;
}
Quantized QuantizeWeights(const std::vector<float>& v, int64_t rows, int k) {
  Quantized out{std::vector<int>(v.size()), std::vector<float>(static_cast<size_t>(rows))};
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int p = 0; p < k; ++p) amax = std::max(amax, std::fabs(v[r * k + p]));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    out.scale[r] = amax / 127.0f;
    for (int p = 0; p < k; ++p) {
      out.q[r * k + p] =
          static_cast<int>(std::clamp(std::nearbyint(v[r * k + p] * inv), -127.0f, 127.0f));
    }
  }
  return out;
}

struct Variant {
  gemm::Int8Kernel kernel;
  const char* name;
};
void PrintTo(const Variant& variant, std::ostream* os) { *os << variant.name; }

class EncoderGemmInt8Test : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    if (GetParam().kernel == gemm::Int8Kernel::kAvx512Vnni && !gemm::Int8VnniSupported()) {
      GTEST_SKIP() << "this CPU (or build) has no AVX512_VNNI with AVX-512F/BW/VL: the "
                      "avx512-vnni variant is not run; the generic one is";
    }
    if (GetParam().kernel == gemm::Int8Kernel::kAmx && !gemm::Amx().int8) {
      GTEST_SKIP() << "no AMX here (" << gemm::Amx().reason
                   << "): the amx variant runs emulated in engine_encoder_gemm_amx_test";
    }
  }
  void Run(const std::vector<float>& x, int64_t m, const PackedWeights& w, const float* bias,
           std::vector<float>& y) const {
    y.assign(static_cast<size_t>(m * w.n()), NAN);
    gemm::Int8PanelGemm(GetParam().kernel, x.data(), w.k(), m, w.int8_data(), w.int8_panel_stride(),
                        w.int8_scales(), w.int8_sums(), w.n(), w.k(), bias, y.data(), w.n());
  }
};

TEST(EncoderGemmInt8PackTest, PackHoldsPerChannelInt8InAQuarterOfTheBytes) {
  std::mt19937 rng(3);
  for (const auto& [n, k] : {std::pair{21, 7}, std::pair{16, 32}, std::pair{33, 1}}) {
    const std::vector<float> w = Random(int64_t{n} * k, rng);
    const PackedWeights fp32 = PackedWeights::Pack(w, n, k);
    const PackedWeights int8 = PackedWeights::Pack(w, n, k, WeightFormat::kInt8);
    EXPECT_EQ(int8.format(), WeightFormat::kInt8);
    EXPECT_EQ(int8.data(), nullptr);
    EXPECT_EQ(int8.bytes(), int64_t{int8.panels()} * kPanelWidth * ((k + 3) / 4 * 4 + 8));
    if (k % 4 == 0) {
      EXPECT_LT(4 * int8.bytes(), fp32.bytes() * 1.3);
    }
    const Quantized q = QuantizeWeights(w, n, k);
    const std::vector<float> back = int8.Unpack();
    for (int j = 0; j < int8.panels() * kPanelWidth; ++j) {
      int32_t sum = 0;
      for (int p = 0; p < k; ++p) {
        const int8_t v = int8.int8_data()[(j / kPanelWidth) * int8.int8_panel_stride() +
                                          (p / 4) * 64 + 4 * (j % kPanelWidth) + p % 4];
        if (j >= n) {
          EXPECT_EQ(v, 0) << "padding column " << j;
          continue;
        }
        EXPECT_EQ(v, q.q[j * k + p]);
        EXPECT_EQ(back[j * k + p], static_cast<float>(v) * q.scale[j]);
        sum += v;
      }
      EXPECT_EQ(int8.int8_sums()[j], sum) << j;
      EXPECT_EQ(int8.int8_scales()[j], j < n ? q.scale[j] : 0.0f) << j;
      for (int p = k; p < int8.int8_quads() * 4; ++p) {
        EXPECT_EQ(int8.int8_data()[(j / kPanelWidth) * int8.int8_panel_stride() + (p / 4) * 64 +
                                   4 * (j % kPanelWidth) + p % 4],
                  0)
            << "K padding";
      }
    }
  }
}

// y against (a) the exact product of the quantized operands, scaled: only the epilogue's FP32
// rounding (a few ulps) is allowed; (b) the FP32 product: each term x w is off by at most
// |x| ws/2 + |w| xs + xs ws/2 (w within half a step; x within half, or one where clamped).
int CountMismatches(const std::vector<float>& x, const std::vector<float>& w,
                    const std::vector<float>& bias, int64_t m, int n, int k,
                    const std::vector<float>& y, const std::string& what) {
  const Quantized qx = QuantizeActivations(x, m, k);
  const Quantized qw = QuantizeWeights(w, n, k);
  int failures = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      int64_t dot = 0;
      double exact = bias[j], quant_bound = 0, magnitude = std::abs(bias[j]);
      const double xs = qx.scale[i], ws = qw.scale[j];
      for (int p = 0; p < k; ++p) {
        dot += int64_t{qx.q[i * k + p]} * qw.q[int64_t{j} * k + p];
        const double xv = x[i * k + p], wv = w[int64_t{j} * k + p];
        exact += xv * wv;
        // A whole step of x: the clamp to 255 may take one where round(hi * inv) + zp is 256.
        quant_bound += std::abs(xv) * ws / 2 + std::abs(wv) * xs + xs * ws / 2;
      }
      const double quantized = static_cast<double>(dot) * xs * ws + bias[j];
      magnitude += std::abs(static_cast<double>(dot) * xs * ws);
      const double got = y[i * n + j];
      const double ulps = 4 * std::ldexp(1.0, -24) * magnitude + 1e-30;
      if (!(std::abs(got - quantized) <= ulps) && ++failures <= 5) {
        ADD_FAILURE() << what << ": y[" << i << "][" << j << "] = " << got << ", quantized product "
                      << quantized << " (bound " << ulps << ")";
      }
      if (!(std::abs(got - exact) <= quant_bound * 1.001 + ulps) && ++failures <= 5) {
        ADD_FAILURE() << what << ": y[" << i << "][" << j << "] = " << got << ", FP32 product "
                      << exact << " (bound " << quant_bound << ")";
      }
    }
  }
  return failures;
}

TEST_P(EncoderGemmInt8Test, MatchesTheQuantizedAndTheFp32ProductsOnRaggedShapes) {
  std::mt19937 rng(11);
  std::vector<float> y;
  for (int64_t m : {1, 7, 33, 200}) {
    for (int n : {1, 17, 33, 47}) {
      for (int k : {1, 3, 31, 257, 600}) {
        std::vector<float> x = Random(m * k, rng);
        if (m == 7) std::fill_n(x.begin() + k, k, 0.0f);  // a zero row: its scale is 0
        const std::vector<float> w = Random(int64_t{n} * k, rng);
        const std::vector<float> bias = Random(n, rng);
        const PackedWeights packed = PackedWeights::Pack(w, n, k, WeightFormat::kInt8);
        Run(x, m, packed, bias.data(), y);
        const std::string what = std::string(GetParam().name) + " M " + std::to_string(m) + " N " +
                                 std::to_string(n) + " K " + std::to_string(k);
        EXPECT_EQ(CountMismatches(x, w, bias, m, n, k, y, what), 0);
      }
    }
  }
}

TEST_P(EncoderGemmInt8Test, WithoutBiasAndByRowsAloneGivesTheSameBitsAsTheGenericVariant) {
  std::mt19937 rng(5);
  const int64_t m = 37;
  const int n = 65;
  const int k = 130;
  const std::vector<float> x = Random(m * k, rng);
  const std::vector<float> w = Random(int64_t{n} * k, rng);
  const PackedWeights packed = PackedWeights::Pack(w, n, k, WeightFormat::kInt8);
  std::vector<float> y;
  Run(x, m, packed, nullptr, y);
  EXPECT_EQ(CountMismatches(x, w, std::vector<float>(n, 0.0f), m, n, k, y, "no bias"), 0);
  std::vector<float> generic(y.size());
  gemm::Int8PanelGemm(gemm::Int8Kernel::kGeneric, x.data(), k, m, packed.int8_data(),
                      packed.int8_panel_stride(), packed.int8_scales(), packed.int8_sums(), n, k,
                      nullptr, generic.data(), n);
  EXPECT_EQ(y, generic);
  for (int64_t i : {int64_t{0}, int64_t{8}, m - 1}) {
    std::vector<float> alone;
    Run(std::vector<float>(x.begin() + i * k, x.begin() + (i + 1) * k), 1, packed, nullptr, alone);
    EXPECT_EQ(alone, std::vector<float>(y.begin() + i * n, y.begin() + (i + 1) * n)) << "row " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, EncoderGemmInt8Test,
                         ::testing::Values(Variant{gemm::Int8Kernel::kGeneric, "generic"},
                                           Variant{gemm::Int8Kernel::kAvx512Vnni, "avx512_vnni"},
                                           Variant{gemm::Int8Kernel::kAmx, "amx"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(EncoderGemmInt8PackTest, PackedGemmRunsInt8AndAPooledProductIsTheSameBits) {
  std::mt19937 rng(9);
  ComputePool pool(3);
  for (const auto& [m, n, k] :
       {std::tuple{int64_t{1}, 1152, 384}, std::tuple{int64_t{300}, 47, 257},
        std::tuple{int64_t{64}, 384, 1536}}) {
    const std::vector<float> x = Random(m * k, rng);
    const std::vector<float> w = Random(int64_t{n} * k, rng);
    const std::vector<float> bias = Random(n, rng);
    const PackedWeights packed = PackedWeights::Pack(w, n, k, WeightFormat::kInt8);
    std::vector<float> single(static_cast<size_t>(m * n)), pooled(single.size());
    std::vector<float> direct(single.size());
    PackedGemm(gemm::Get(), x.data(), m, packed, bias.data(), single.data());
    PackedGemm(&pool, gemm::Get(), x.data(), m, packed, bias.data(), pooled.data(), 0);
    gemm::Int8PanelGemm(gemm::Int8For(gemm::Get()), x.data(), k, m, packed.int8_data(),
                        packed.int8_panel_stride(), packed.int8_scales(), packed.int8_sums(), n, k,
                        bias.data(), direct.data(), n);
    EXPECT_EQ(single, direct) << m << "x" << n << "x" << k;
    EXPECT_EQ(pooled, single) << m << "x" << n << "x" << k;
  }
  // The generic FP32 kernel selects the generic INT8 one (SLUICE_ENCODER_GEMM=generic).
  EXPECT_EQ(gemm::Int8For(gemm::Generic()), gemm::Int8Kernel::kGeneric);
}

TEST(EncoderGemmInt8PackTest, Int8SpeedupIsMeasuredOnce) {
  if (!gemm::Int8VnniSupported()) {
    EXPECT_EQ(gemm::Int8Speedup(), 0.0);
    GTEST_SKIP() << "this CPU (or build) has no AVX512_VNNI: nothing to measure";
  }
  const double speedup = gemm::Int8Speedup();
  EXPECT_GT(speedup, 0.1);
  // Where AMX runs the product, TDPBUSD's peak: 32x FMA's multiply-adds on Sapphire Rapids.
  EXPECT_LT(speedup, gemm::AmxInt8Enabled() ? 128.0 : 20.0);
  EXPECT_EQ(gemm::Int8Speedup(), speedup);
  std::printf("VPDPBUSD / FP32 FMA peak multiply-add rate on this CPU: %.2fx\n", speedup);
}

}  // namespace
}  // namespace sluice::engine::models::encoder
