// The FP32 product on weights held in 16 bits (encoder_gemm.h: kFp32HeldBf16, kFp32HeldFp16; issue
// 31: a BF16 or FP16 checkpoint is not inflated to FP32 at load). Its promise is exactness: the
// same bits as the kFp32 product on the same (widened) values, for every micro-kernel variant this
// CPU runs, on every shape remainder (partial panels, K split into uneven blocks, M past a row
// block), serial and pooled; and the choice of form (ExactFp32Storage) never rounds a value.

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/wire/float16.h"
#include "engine/core/compute_pool.h"
#include "engine/models/encoder/encoder_gemm.h"
#include "engine/models/encoder/encoder_gemm_test_support.h"
#include "gtest/gtest.h"

namespace sluice::engine::models::encoder {
namespace {

std::vector<float> Random(int64_t size, std::mt19937& rng) {
  return test_support::RandomNormal(size, rng, 0.05f);
}

// `w` rounded to the 16-bit format, as a checkpoint stored in it holds it.
std::vector<float> Rounded(std::vector<float> w, bool fp16) {
  for (float& v : w) {
    v = fp16 ? wire::HalfToFloat(wire::FloatToHalf(v))
             : wire::BFloat16ToFloat(wire::FloatToBFloat16(v));
  }
  return w;
}

std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = std::bit_cast<uint32_t>(v[i]);
  return bits;
}

TEST(EncoderGemmHeldTest, ExactFp32StorageTakesTheSmallestFormThatLosesNothing) {
  std::mt19937 rng(3);
  const std::vector<float> w = Random(4096, rng);
  EXPECT_EQ(ExactFp32Storage(w), WeightFormat::kFp32);
  EXPECT_EQ(ExactFp32Storage(Rounded(w, false)), WeightFormat::kFp32HeldBf16);
  EXPECT_EQ(ExactFp32Storage(Rounded(w, true)), WeightFormat::kFp32HeldFp16);
  // FP16's edges: subnormals (multiples of 2^-24), the largest finite, infinities, zeros.
  std::vector<float> edges = {0x1p-24f, 3 * 0x1p-24f, 0x1.ff8p-15f, 65504.0f, -65504.0f,
                              INFINITY, -INFINITY,    0.0f,         -0.0f,    0x1.004p0f};
  EXPECT_EQ(ExactFp32Storage(edges), WeightFormat::kFp32HeldFp16);
  for (float outside : {0x1p-25f, 5 * 0x1p-25f, 65536.0f, 0x1.002p0f}) {
    std::vector<float> with = edges;
    with.push_back(outside);
    EXPECT_EQ(ExactFp32Storage(with), WeightFormat::kFp32) << outside;
  }
  // NaN: BF16 holds any whose low half is zero; FP16 only the quiet NaN without payload.
  EXPECT_EQ(ExactFp32Storage({1.0f, std::bit_cast<float>(0x7f810000u)}),
            WeightFormat::kFp32HeldBf16);
  EXPECT_EQ(ExactFp32Storage({0x1.004p0f, std::bit_cast<float>(0x7fc00000u)}),
            WeightFormat::kFp32HeldFp16);
  EXPECT_EQ(ExactFp32Storage({0x1.004p0f, std::bit_cast<float>(0x7fc02000u)}), WeightFormat::kFp32);
  const std::vector<float> nan_row = {std::bit_cast<float>(0x7f810000u), 2.0f};
  EXPECT_EQ(Bits(PackedWeights::Pack(nan_row, 1, 2, WeightFormat::kFp32HeldBf16).Unpack()),
            Bits(nan_row));
  // One value BF16 cannot hold, FP16 can: FP16.
  std::vector<float> mixed = Rounded(w, false);
  mixed[17] = 0x1.004p0f;
  EXPECT_EQ(ExactFp32Storage(mixed), WeightFormat::kFp32HeldFp16);
}

// Every 16-bit value, in both halves of a pair row (value 2c + t of a row goes to panel t, column
// c).
TEST(EncoderGemmHeldTest, EveryVariantWidensEverySixteenBitValueExactly) {
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  const int64_t rows = 65536 / 32;
  for (const gemm::GemmKernel* kernel : test_support::GemmKernels()) {
    for (bool fp16 : {false, true}) {
      std::vector<float> lower(65536 / 2, -1.0f), upper(65536 / 2, -1.0f);
      (fp16 ? kernel->widen_fp16 : kernel->widen_bf16)(all.data(), rows, lower.data(),
                                                       upper.data());
      int failures = 0;
      for (int i = 0; i < 65536 && failures < 5; ++i) {
        const uint32_t expected = std::bit_cast<uint32_t>(fp16 ? wire::HalfToFloat(all[i])
                                                               : wire::BFloat16ToFloat(all[i]));
        const int64_t row = i / 32, c = (i % 32) / 2;
        const float got = (i % 2 == 0 ? lower : upper)[static_cast<size_t>(row * 16 + c)];
        if (std::bit_cast<uint32_t>(got) != expected) {
          ++failures;
          ADD_FAILURE() << kernel->name << (fp16 ? " FP16 0x" : " BF16 0x") << std::hex << i
                        << " -> 0x" << std::bit_cast<uint32_t>(got) << ", expected 0x" << expected;
        }
      }
    }
  }
}

TEST(EncoderGemmHeldTest, PackedHeldWeightsTakeHalfTheBytesAndUnpackToTheirValues) {
  std::mt19937 rng(5);
  for (bool fp16 : {false, true}) {
    const int n = 37, k = 19;
    const std::vector<float> w = Rounded(Random(n * k, rng), fp16);
    const WeightFormat format = fp16 ? WeightFormat::kFp32HeldFp16 : WeightFormat::kFp32HeldBf16;
    const PackedWeights held = PackedWeights::Pack(w, n, k, format);
    const PackedWeights wide = PackedWeights::Pack(w, n, k);
    EXPECT_EQ(held.format(), format);
    EXPECT_EQ(held.data(), nullptr);
    EXPECT_NE(held.held_data(), nullptr);
    // 37 rows: three panels, held as two pairs (the fourth panel zeros).
    EXPECT_EQ(held.bytes(), int64_t{4} * k * kPanelWidth * 2);
    EXPECT_EQ(wide.bytes(), int64_t{3} * k * kPanelWidth * 4);
    EXPECT_EQ(Bits(held.Unpack()), Bits(w));
  }
}

// `precision: bf16` on an FP32 checkpoint where the CPU's BF16 dot product is slow: Pack rounds
// each value to the nearest BF16 (ties to even; exact values, NaN payloads included, as they are),
// and the product is then the FP32 product on those rounded values, bit for bit.
TEST(EncoderGemmHeldTest, HeldBf16RoundsOtherValuesToNearestEven) {
  std::mt19937 rng(11);
  const int n = 21, k = 13;
  std::vector<float> w = Random(n * k, rng);
  // Ties: halfway between two BF16 values, to the even one (down, then up), and a carry into the
  // exponent.
  w[0] = std::bit_cast<float>(0x3f808000u);
  w[1] = std::bit_cast<float>(0x3f818000u);
  w[2] = std::bit_cast<float>(0x3fffffffu);
  w[3] = std::bit_cast<float>(0x7f810000u);  // a signalling NaN BF16 holds as it is
  const PackedWeights held = PackedWeights::Pack(w, n, k, WeightFormat::kFp32HeldBf16);
  const std::vector<float> got = held.Unpack();
  EXPECT_EQ(std::bit_cast<uint32_t>(got[0]), 0x3f800000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(got[1]), 0x3f820000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(got[2]), 0x40000000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(got[3]), 0x7f810000u);
  std::vector<float> rounded = Rounded(w, false);
  rounded[3] = w[3];
  EXPECT_EQ(Bits(got), Bits(rounded));

  w[3] = 0.5f;
  rounded[3] = 0.5f;
  const int64_t m = 9;
  const std::vector<float> x = Random(m * k, rng);
  const PackedWeights from_fp32 = PackedWeights::Pack(w, n, k, WeightFormat::kFp32HeldBf16);
  const PackedWeights wide = PackedWeights::Pack(rounded, n, k);
  for (const gemm::GemmKernel* kernel : test_support::GemmKernels()) {
    std::vector<float> expected(static_cast<size_t>(m * n)), product(static_cast<size_t>(m * n));
    PackedGemm(*kernel, x.data(), m, wide, nullptr, expected.data());
    PackedGemm(*kernel, x.data(), m, from_fp32, nullptr, product.data());
    EXPECT_EQ(Bits(product), Bits(expected)) << kernel->name;
  }
}

// The product on held weights is the kFp32 product's bits: single-threaded for each variant, and
// pooled, on shapes across every block boundary (rows 192, K blocks of <= 256, 16-panel column
// blocks, a partial last panel).
TEST(EncoderGemmHeldTest, TheHeldProductIsTheFp32ProductBitForBit) {
  std::mt19937 rng(9);
  ComputePool pool(3);
  for (bool fp16 : {false, true}) {
    const WeightFormat format = fp16 ? WeightFormat::kFp32HeldFp16 : WeightFormat::kFp32HeldBf16;
    for (int64_t m : {1, 7, 130, 200}) {
      for (int n : {5, 33, 300, 530}) {
        for (int k : {3, 257, 600}) {
          const std::vector<float> x = Random(m * k, rng);
          const std::vector<float> w = Rounded(Random(int64_t{n} * k, rng), fp16);
          const std::vector<float> bias = Random(n, rng);
          const PackedWeights wide = PackedWeights::Pack(w, n, k);
          const PackedWeights held = PackedWeights::Pack(w, n, k, format);
          const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" +
                                    std::to_string(k) + (fp16 ? " fp16" : " bf16");
          for (const gemm::GemmKernel* kernel : test_support::GemmKernels()) {
            std::vector<float> expected(static_cast<size_t>(m * n), -1.0f);
            std::vector<float> got(static_cast<size_t>(m * n), -2.0f);
            PackedGemm(*kernel, x.data(), m, wide, bias.data(), expected.data());
            PackedGemm(*kernel, x.data(), m, held, bias.data(), got.data());
            ASSERT_EQ(Bits(got), Bits(expected)) << kernel->name << " " << shape;
            std::vector<float> pooled(static_cast<size_t>(m * n), -3.0f);
            PackedGemm(&pool, *kernel, x.data(), m, held, nullptr, pooled.data(),
                       /*min_parallel_work=*/0);
            PackedGemm(*kernel, x.data(), m, wide, nullptr, expected.data());
            ASSERT_EQ(Bits(pooled), Bits(expected)) << kernel->name << " pooled " << shape;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace sluice::engine::models::encoder
