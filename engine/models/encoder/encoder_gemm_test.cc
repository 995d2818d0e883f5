// The encoder's packed GEMM (encoder_gemm.h) against a double-precision product, for every
// micro-kernel variant this machine can run (generic always; AVX2 + FMA and AVX-512F where the
// CPU has them), on shapes that exercise every remainder: M not a multiple of any tile height (1,
// 2, 7, 129) and past one M block (200 > 192 rows), N not a multiple of a panel (1, 17, 33) and
// of the AVX-512 panel pair (48), K of one element, one block, an uneven split into blocks (257,
// 600).

#include "engine/models/encoder/encoder_gemm.h"

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/models/encoder/encoder_gemm_test_support.h"
#include "gtest/gtest.h"

namespace sluice::engine::models::encoder {
namespace {

std::vector<float> Random(int64_t size, std::mt19937& rng) {
  return test_support::RandomNormal(size, rng);
}

// Checks y against x w^T + bias in double: each element within the float summation bound
// (K + 2) 2^-24 of the sum of |terms| (a wrong index or a missed block is off by O(the terms)).
void ExpectProduct(const std::vector<float>& x, const std::vector<float>& w,
                   const std::vector<float>* bias, int64_t m, int n, int k,
                   const std::vector<float>& y, const std::string& what) {
  int failures = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = bias != nullptr ? (*bias)[j] : 0.0;
      double magnitude = bias != nullptr ? std::abs((*bias)[j]) : 0.0;
      for (int p = 0; p < k; ++p) {
        const double term = double{x[i * k + p]} * w[int64_t{j} * k + p];
        sum += term;
        magnitude += std::abs(term);
      }
      const double got = y[i * n + j];
      const double bound = (k + 2) * std::ldexp(1.0, -24) * magnitude;
      if (!(std::abs(got - sum) <= bound) && ++failures <= 5) {
        ADD_FAILURE() << what << ": y[" << i << "][" << j << "] = " << got << ", reference " << sum
                      << " (bound " << bound << ")";
      }
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

// Without SLUICE_ENCODER_GEMM the widest variant; with it, the one it names (the reference tests
// are also run with each variant forced: see docs/performance.md).
TEST(EncoderGemmTest, GetPicksTheWidestVariantOrTheForcedOne) {
  const char* forced = std::getenv("SLUICE_ENCODER_GEMM");
  const char* kernels = std::getenv("SLUICE_ENCODER_KERNELS");
  const char* widest = gemm::Avx512() ? "avx512f" : gemm::Avx2Fma() ? "avx2-fma" : "generic";
  std::string expected = widest;
  if (forced != nullptr) {
    for (const gemm::GemmKernel* k : test_support::GemmKernels()) {
      if (std::string(forced) == k->name) expected = k->name;
    }
  } else if (kernels != nullptr && std::string(kernels) == "generic") {
    expected = "generic";
  }
  EXPECT_EQ(gemm::Get().name, expected);
}

TEST(EncoderGemmTest, PackUnpackRoundTripsAndPadsTheLastPanelWithZeros) {
  std::mt19937 rng(7);
  const int n = 21;
  const int k = 5;
  const std::vector<float> w = Random(int64_t{n} * k, rng);
  const PackedWeights packed = PackedWeights::Pack(w, n, k);
  EXPECT_EQ(packed.panels(), 2);
  EXPECT_EQ(packed.bytes(), 2 * 16 * k * 4);
  EXPECT_EQ(packed.Unpack(), w);
  // Row p of panel 0 holds column p of W's rows 0..15.
  EXPECT_EQ(packed.data()[3 * 16 + 2], w[2 * k + 3]);
  for (int p = 0; p < k; ++p) {
    for (int c = n - 16; c < 16; ++c) {
      EXPECT_EQ(packed.data()[packed.panel_stride() + p * 16 + c], 0.0f);
    }
  }
}

TEST(EncoderGemmTest, MatchesDoublePrecisionOnOddShapes) {
  std::mt19937 rng(1);
  for (const gemm::GemmKernel* kernel : test_support::GemmKernels()) {
    for (int64_t m : {1, 2, 7, 129, 200}) {
      for (int n : {1, 17, 33, 48, 64}) {
        for (int k : {1, 3, 257, 600}) {
          const std::vector<float> x = Random(m * k, rng);
          const std::vector<float> w = Random(int64_t{n} * k, rng);
          const std::vector<float> bias = Random(n, rng);
          const PackedWeights packed = PackedWeights::Pack(w, n, k);
          const std::string what = std::string(kernel->name) + " m=" + std::to_string(m) +
                                   " n=" + std::to_string(n) + " k=" + std::to_string(k);
          std::vector<float> y(static_cast<size_t>(m * n), 1e30f);
          PackedGemm(*kernel, x.data(), m, packed, nullptr, y.data());
          ExpectProduct(x, w, nullptr, m, n, k, y, what);
          std::fill(y.begin(), y.end(), 1e30f);
          PackedGemm(*kernel, x.data(), m, packed, bias.data(), y.data());
          ExpectProduct(x, w, &bias, m, n, k, y, what + " +bias");
        }
      }
    }
  }
}

TEST(EncoderGemmTest, MatchesDoublePrecisionOnTheEncoderShapes) {
  std::mt19937 rng(2);
  // MiniLM's QKV and output GEMMs (N x K = 1152 x 384, 384 x 1536) at 1 and 37 tokens.
  for (const gemm::GemmKernel* kernel : test_support::GemmKernels()) {
    for (const auto& [n, k] : {std::pair{1152, 384}, std::pair{384, 1536}}) {
      for (int64_t m : {1, 37}) {
        const std::vector<float> x = Random(m * k, rng);
        const std::vector<float> w = Random(int64_t{n} * k, rng);
        const std::vector<float> bias = Random(n, rng);
        std::vector<float> y(static_cast<size_t>(m * n));
        PackedGemm(*kernel, x.data(), m, PackedWeights::Pack(w, n, k), bias.data(), y.data());
        ExpectProduct(x, w, &bias, m, n, k, y,
                      std::string(kernel->name) + " " + std::to_string(n) + "x" +
                          std::to_string(k) + " m=" + std::to_string(m));
      }
    }
  }
}

// The attention's use: operands packed per call from strided rows (PackPanels for the keys,
// PackTransposedPanels for the values), X read with a leading dimension wider than K and Y written
// into a wider row (the per-head slices of QKV and of the context), columns beside Y's untouched.
TEST(EncoderGemmTest, StridedPanelGemmMatchesDoublePrecisionAndWritesOnlyItsColumns) {
  std::mt19937 rng(4);
  for (const gemm::GemmKernel* kernel : test_support::GemmKernels()) {
    for (int n : {5, 32, 64, 130}) {
      for (int k : {7, 32, 128}) {
        const int64_t m = 37;
        const int64_t ldx = k + 9;
        const int64_t ldw = k + 3;
        const int64_t ldy = n + 11;
        const std::vector<float> xs = Random(m * ldx, rng);
        const std::vector<float> ws = Random(int64_t{n} * ldw, rng);
        // The dense operands the reference reads.
        std::vector<float> x(static_cast<size_t>(m * k));
        std::vector<float> w(static_cast<size_t>(int64_t{n} * k));
        for (int64_t i = 0; i < m; ++i)
          for (int p = 0; p < k; ++p) x[i * k + p] = xs[i * ldx + p];
        for (int j = 0; j < n; ++j)
          for (int p = 0; p < k; ++p) w[int64_t{j} * k + p] = ws[j * ldw + p];
        // w^T laid out [k, n] with a leading dimension, as the values are.
        const int64_t ldv = n + 5;
        std::vector<float> v(static_cast<size_t>(int64_t{k} * ldv), 7.0f);
        for (int j = 0; j < n; ++j)
          for (int p = 0; p < k; ++p) v[p * ldv + j] = w[int64_t{j} * k + p];

        std::vector<float> direct(static_cast<size_t>(PanelFloats(n, k)), -1.0f);
        std::vector<float> transposed(direct.size(), -2.0f);
        PackPanels(ws.data(), ldw, n, k, direct.data());
        PackTransposedPanels(v.data(), ldv, k, n, transposed.data());
        ASSERT_EQ(direct, transposed) << "n=" << n << " k=" << k;
        const PackedWeights packed = PackedWeights::Pack(w, n, k);
        ASSERT_EQ(direct, std::vector<float>(packed.data(), packed.data() + direct.size()));

        std::vector<float> ys(static_cast<size_t>(m * ldy), 3.0f);
        PanelGemm(*kernel, xs.data(), ldx, m, direct.data(), n, k, nullptr, ys.data(), ldy);
        std::vector<float> y(static_cast<size_t>(m * n));
        for (int64_t i = 0; i < m; ++i) {
          for (int j = 0; j < n; ++j) y[i * n + j] = ys[i * ldy + j];
          for (int64_t j = n; j < ldy; ++j) ASSERT_EQ(ys[i * ldy + j], 3.0f) << "row " << i;
        }
        ExpectProduct(x, w, nullptr, m, n, k, y,
                      std::string(kernel->name) + " strided n=" + std::to_string(n) +
                          " k=" + std::to_string(k));
      }
    }
  }
}

// A row's result does not depend on the other rows: the same bits alone as at any place in a
// batch (the encoder's "a sequence's answer does not depend on its batch-mates").
// Split over a compute pool (row blocks x column ranges of panel pairs), the product is the same
// bits as on one thread: every element is summed in the same order, by the same tile shape.
TEST(EncoderGemmTest, APooledProductIsTheSingleThreadedProductBitForBit) {
  std::mt19937 rng(11);
  ComputePool pool(3);
  const gemm::GemmKernel& kernel = gemm::Get();
  // Odd column counts (a partial last panel, fewer panels than tasks), rows across the row block
  // (192), biased and not.
  for (int64_t m : {1, 7, 191, 193, 400}) {
    for (int n : {5, 16, 33, 100, 384}) {
      for (int k : {3, 64, 257}) {
        const std::vector<float> x = Random(m * k, rng);
        const std::vector<float> w = Random(int64_t{n} * k, rng);
        const std::vector<float> bias = Random(n, rng);
        const PackedWeights packed = PackedWeights::Pack(w, n, k);
        for (const float* b : {bias.data(), static_cast<const float*>(nullptr)}) {
          std::vector<float> serial(static_cast<size_t>(m * n), -1.0f);
          std::vector<float> pooled(static_cast<size_t>(m * n), -2.0f);
          PackedGemm(kernel, x.data(), m, packed, b, serial.data());
          PackedGemm(&pool, kernel, x.data(), m, packed, b, pooled.data(), /*min_parallel_work=*/0);
          ASSERT_EQ(pooled, serial) << m << "x" << n << "x" << k << (b ? " biased" : "");
        }
      }
    }
  }
}

TEST(EncoderGemmTest, ARowsResultDoesNotDependOnItsBatchMates) {
  std::mt19937 rng(3);
  const int64_t m = 203;
  const int n = 80;
  const int k = 700;
  const std::vector<float> x = Random(m * k, rng);
  const PackedWeights packed = PackedWeights::Pack(Random(int64_t{n} * k, rng), n, k);
  const std::vector<float> bias = Random(n, rng);
  for (const gemm::GemmKernel* kernel : test_support::GemmKernels()) {
    std::vector<float> all(static_cast<size_t>(m * n));
    PackedGemm(*kernel, x.data(), m, packed, bias.data(), all.data());
    for (int64_t i : {0, 5, 7, 100, 191, 192, 202}) {
      std::vector<float> alone(static_cast<size_t>(n));
      PackedGemm(*kernel, x.data() + i * k, 1, packed, bias.data(), alone.data());
      for (int j = 0; j < n; ++j) {
        ASSERT_EQ(alone[j], all[i * n + j]) << kernel->name << " row " << i << " column " << j;
      }
    }
  }
}

}  // namespace
}  // namespace sluice::engine::models::encoder
