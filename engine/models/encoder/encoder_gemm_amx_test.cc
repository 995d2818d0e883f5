// The AMX GEMMs (encoder_gemm_amx.h) on two tile back ends: the scalar emulator of the tile
// instructions (encoder_gemm_amx_emulator.h, on every x86-64 CPU with AVX512_BF16 for the BF16
// product's activation conversion; the INT8 product on every CPU) and the hardware (where
// Amx().hardware; skipped with the reason elsewhere, which on this project's VMs is always).
// INT8: bit for bit against the VNNI (or generic) kernel, whose epilogue and quantization it
// shares and whose int32 sums are exact. BF16: against a double product of the BF16-rounded
// operands within FP32 accumulation error, and against the AVX-512 BF16 kernel. Shapes across
// every tile edge: M = 1..40 (one and two A tiles, partial ones), 191-193 and 4099 (M blocks),
// N with odd and partial panels, K not a multiple of the 32 (BF16) / 64 (INT8) values of a tile
// step. Then PackedGemm's dispatch through the test seam, serial and pooled.

#include "engine/models/encoder/encoder_gemm_amx.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "engine/core/compute_pool.h"
#include "engine/models/encoder/encoder_gemm.h"
#include "engine/models/encoder/encoder_gemm_amx_emulator.h"
#include "engine/models/encoder/encoder_gemm_test_support.h"
#include "gtest/gtest.h"

namespace sluice::engine::models::encoder {
namespace {

using gemm::amx::EmulatedTiles;

struct Backend {
  bool hardware;
  const char* name;
};
void PrintTo(const Backend& backend, std::ostream* os) { *os << backend.name; }

struct Shape {
  int64_t m;
  int n;
  int k;
};

// Every M of 1..40 (one and two A tiles, whole and partial), the (N, K) edges on M of one, a
// partial and two A tiles, M blocks (191-193) and many of them (4099). Sized for the sanitizer
// builds (-O0): the emulator does every tile's 16 x 16 x 16 dword products.
std::vector<Shape> Shapes() {
  std::vector<Shape> shapes;
  for (int64_t m = 1; m <= 40; ++m) shapes.push_back({m, 17, 33});
  for (int64_t m : {1, 17, 33}) {
    for (int n : {1, 16, 31, 47}) {
      for (int k : {1, 3, 31, 32, 65, 130, 257}) shapes.push_back({m, n, k});
    }
  }
  for (int64_t m : {191, 192, 193}) shapes.push_back({m, 33, 67});
  shapes.push_back({4099, 5, 9});
  return shapes;
}

std::string Name(const Shape& s) {
  return "M " + std::to_string(s.m) + " N " + std::to_string(s.n) + " K " + std::to_string(s.k);
}

class EncoderGemmAmxTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam().hardware && !gemm::Amx().hardware) {
      GTEST_SKIP() << "no AMX here (" << gemm::Amx().reason
                   << "): the hardware kernels are not run; the emulated ones are";
    }
  }
  void Bf16(const float* x, int64_t rows, const PackedWeights& w, const float* bias,
            float* y) const {
    if (GetParam().hardware) {
      gemm::AmxBf16PanelGemm(x, w.k(), rows, w.bf16_data(), w.bf16_panel_stride(), w.n(), w.k(),
                             bias, y, w.n());
    } else {
      gemm::amx::EmulatedAmxBf16(x, w.k(), rows, w.bf16_data(), w.bf16_panel_stride(), w.n(), w.k(),
                                 bias, y, w.n());
    }
  }
  void Int8(const float* x, int64_t rows, const PackedWeights& w, const float* bias,
            float* y) const {
    if (GetParam().hardware) {
      gemm::AmxInt8PanelGemm(x, w.k(), rows, w.int8_data(), w.int8_panel_stride(), w.int8_scales(),
                             w.int8_sums(), w.n(), w.k(), bias, y, w.n());
    } else {
      gemm::amx::EmulatedAmxInt8(x, w.k(), rows, w.int8_data(), w.int8_panel_stride(),
                                 w.int8_scales(), w.int8_sums(), w.n(), w.k(), bias, y, w.n());
    }
  }
};

gemm::Int8Kernel Reference() {
  return gemm::Int8VnniSupported() ? gemm::Int8Kernel::kAvx512Vnni : gemm::Int8Kernel::kGeneric;
}

TEST_P(EncoderGemmAmxTest, Int8IsTheVnniKernelsBitsOnEveryTileEdge) {
  std::mt19937 rng(36);
  for (const Shape& s : Shapes()) {
    std::vector<float> x = test_support::RandomNormal(s.m * s.k, rng);
    if (s.m > 2) std::fill_n(x.begin() + s.k, s.k, 0.0f);  // a zero row: scale 0
    const std::vector<float> w = test_support::RandomNormal(int64_t{s.n} * s.k, rng);
    const std::vector<float> bias = test_support::RandomNormal(s.n, rng);
    const PackedWeights p = PackedWeights::Pack(w, s.n, s.k, WeightFormat::kInt8);
    for (const float* b : {bias.data(), static_cast<const float*>(nullptr)}) {
      std::vector<float> got(static_cast<size_t>(s.m * s.n), NAN), want(got.size(), NAN);
      Int8(x.data(), s.m, p, b, got.data());
      gemm::Int8PanelGemm(Reference(), x.data(), s.k, s.m, p.int8_data(), p.int8_panel_stride(),
                          p.int8_scales(), p.int8_sums(), s.n, s.k, b, want.data(), s.n);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
          << Name(s) << (b == nullptr ? " without bias" : " with bias");
    }
  }
}

TEST_P(EncoderGemmAmxTest, Bf16MatchesTheRoundedProductOnEveryTileEdge) {
  if (!gemm::Bf16Supported()) {
    GTEST_SKIP() << "no AVX512_BF16: the AMX BF16 kernel converts its activations with it";
  }
  std::mt19937 rng(37);
  for (const Shape& s : Shapes()) {
    const std::vector<float> x = test_support::RandomNormal(s.m * s.k, rng);
    const std::vector<float> w = test_support::RandomNormal(int64_t{s.n} * s.k, rng);
    const std::vector<float> bias = test_support::RandomNormal(s.n, rng);
    const PackedWeights p = PackedWeights::Pack(w, s.n, s.k, WeightFormat::kBf16);
    const std::vector<float> wr = p.Unpack();  // W as rounded to BF16
    std::vector<float> got(static_cast<size_t>(s.m * s.n), NAN), avx(got.size(), NAN);
    Bf16(x.data(), s.m, p, bias.data(), got.data());
    gemm::Bf16PanelGemm(gemm::Bf16Kernel::kAvx512Bf16, x.data(), s.k, s.m, p.bf16_data(),
                        p.bf16_panel_stride(), s.n, s.k, bias.data(), avx.data(), s.n);
    int failures = 0;
    for (int64_t i = 0; i < s.m; ++i) {
      for (int j = 0; j < s.n; ++j) {
        double exact = bias[j], magnitude = std::abs(bias[j]);
        for (int q = 0; q < s.k; ++q) {
          const double term =
              double{Bf16ToFloat(RoundToBf16(x[i * s.k + q]))} * wr[int64_t{j} * s.k + q];
          exact += term;
          magnitude += std::abs(term);
        }
        // FP32 accumulation of K + 1 terms: (K + 1) units of 2^-24 of the magnitude.
        const double bound = (s.k + 1) * std::ldexp(1.0, -24) * magnitude + 1e-30;
        const double y = got[i * s.n + j];
        if (!(std::abs(y - exact) <= bound) && ++failures <= 5) {
          ADD_FAILURE() << Name(s) << ": y[" << i << "][" << j << "] = " << y << ", exact " << exact
                        << " (bound " << bound << ")";
        }
        if (!(std::abs(y - avx[i * s.n + j]) <= 2 * bound) && ++failures <= 5) {
          ADD_FAILURE() << Name(s) << ": y[" << i << "][" << j << "] = " << y
                        << ", AVX-512 BF16 kernel " << avx[i * s.n + j];
        }
      }
    }
    ASSERT_EQ(failures, 0) << Name(s);
  }
}

TEST_P(EncoderGemmAmxTest, ARowsResultDoesNotDependOnItsBatchMates) {
  std::mt19937 rng(38);
  const int64_t m = 37;
  const int n = 35, k = 77;
  const std::vector<float> x = test_support::RandomNormal(m * k, rng);
  const std::vector<float> w = test_support::RandomNormal(int64_t{n} * k, rng);
  for (WeightFormat format : {WeightFormat::kBf16, WeightFormat::kInt8}) {
    if (format == WeightFormat::kBf16 && !gemm::Bf16Supported()) continue;
    const PackedWeights p = PackedWeights::Pack(w, n, k, format);
    std::vector<float> all(static_cast<size_t>(m * n)), one(static_cast<size_t>(n));
    auto run = [&](const float* xs, int64_t rows, float* y) {
      format == WeightFormat::kBf16 ? Bf16(xs, rows, p, nullptr, y) : Int8(xs, rows, p, nullptr, y);
    };
    run(x.data(), m, all.data());
    for (int64_t i = 0; i < m; ++i) {
      run(x.data() + i * k, 1, one.data());
      ASSERT_EQ(std::memcmp(one.data(), all.data() + i * n, n * sizeof(float)), 0) << "row " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, EncoderGemmAmxTest,
                         ::testing::Values(Backend{false, "emulated"}, Backend{true, "hardware"}),
                         [](const auto& info) { return std::string(info.param.name); });

// PackedGemm on kBf16 / kInt8 weights runs the AMX kernels where they are enabled: here through
// the test seam with the emulated ones, serial and split over a pool (each pool thread loads its
// own tile configuration): the pooled result is the serial one's bits, INT8's the VNNI kernel's.
TEST(EncoderGemmAmxDispatchTest, PackedGemmRunsTheEmulatedKernelsSerialAndPooled) {
  const gemm::AmxKernels emulated{&gemm::amx::EmulatedAmxBf16, &gemm::amx::EmulatedAmxInt8};
  gemm::SetAmxKernelsForTest(&emulated);
  EXPECT_EQ(gemm::Int8For(gemm::Get()), gemm::Int8Kernel::kAmx);
  EXPECT_EQ(gemm::Int8For(gemm::Generic()), gemm::Int8Kernel::kGeneric);
  EXPECT_EQ(gemm::Bf16For(), gemm::Bf16Kernel::kAmx);
  EXPECT_STREQ(gemm::Int8KernelName(gemm::Int8Kernel::kAmx), "amx");
  std::mt19937 rng(39);
  const int64_t m = 400;  // three 192-row blocks: tasks of several rows and columns
  const int n = 97, k = 70;
  const std::vector<float> x = test_support::RandomNormal(m * k, rng);
  const std::vector<float> w = test_support::RandomNormal(int64_t{n} * k, rng);
  const std::vector<float> bias = test_support::RandomNormal(n, rng);
  ComputePool pool(3);
  for (WeightFormat format : {WeightFormat::kBf16, WeightFormat::kInt8}) {
    if (format == WeightFormat::kBf16 && !gemm::Bf16Supported()) continue;
    const PackedWeights p = PackedWeights::Pack(w, n, k, format);
    std::vector<float> serial(static_cast<size_t>(m * n), NAN), pooled(serial.size(), NAN);
    PackedGemm(gemm::Get(), x.data(), m, p, bias.data(), serial.data());
    PackedGemm(&pool, gemm::Get(), x.data(), m, p, bias.data(), pooled.data(), 0);
    EXPECT_EQ(std::memcmp(serial.data(), pooled.data(), serial.size() * sizeof(float)), 0)
        << (format == WeightFormat::kBf16 ? "bf16" : "int8");
    if (format == WeightFormat::kInt8) {
      std::vector<float> want(serial.size(), NAN);
      gemm::Int8PanelGemm(Reference(), x.data(), k, m, p.int8_data(), p.int8_panel_stride(),
                          p.int8_scales(), p.int8_sums(), n, k, bias.data(), want.data(), n);
      EXPECT_EQ(std::memcmp(serial.data(), want.data(), want.size() * sizeof(float)), 0);
    }
  }
  gemm::SetAmxKernelsForTest(nullptr);
  EXPECT_EQ(gemm::AmxInt8Enabled(), gemm::Amx().int8);
}

// SLUICE_ENCODER_GEMM naming another variant keeps the products off AMX, even where there are
// AMX kernels to run (engine_encoder_gemm_amx_switch_test runs this with =avx512-vnni).
TEST(EncoderGemmAmxSwitchTest, NamingAnotherVariantKeepsAmxOff) {
  const char* forced = std::getenv("SLUICE_ENCODER_GEMM");
  if (forced == nullptr || std::string(forced) == "amx") {
    GTEST_SKIP()
        << "SLUICE_ENCODER_GEMM names no other variant: engine_encoder_gemm_amx_switch_test "
           "runs this case";
  }
  const gemm::AmxKernels emulated{&gemm::amx::EmulatedAmxBf16, &gemm::amx::EmulatedAmxInt8};
  gemm::SetAmxKernelsForTest(&emulated);
  EXPECT_FALSE(gemm::AmxBf16Enabled());
  EXPECT_FALSE(gemm::AmxInt8Enabled());
  EXPECT_EQ(gemm::Bf16For(), gemm::Bf16Kernel::kAvx512Bf16);
  EXPECT_NE(gemm::Int8For(gemm::Get()), gemm::Int8Kernel::kAmx);
  gemm::SetAmxKernelsForTest(nullptr);
}

// The emulator itself against hand-worked instructions: TDPBUSD's u8 x s8 signedness and K
// grouping; TDPBF16PS's pairs, its denormal inputs as zero.
TEST(EncoderGemmAmxEmulatorTest, DotProductsFollowIntelsSemantics) {
  gemm::amx::TileConfig config;
  config.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = 1;
    config.colsb[t] = 4;
  }
  EmulatedTiles tiles;
  tiles.Configure(config);
  const uint8_t a[4] = {255, 1, 2, 3};
  const int8_t b[4] = {-1, -128, 127, 2};
  tiles.Load<4>(a, 4);
  tiles.Load<6>(b, 4);
  tiles.Zero<0>();
  tiles.DotU8S8<0, 4, 6>();
  tiles.DotU8S8<0, 4, 6>();
  int32_t c = 0;
  tiles.Store<0>(&c, 4);
  EXPECT_EQ(c, 2 * (255 * -1 + 1 * -128 + 2 * 127 + 3 * 2));

  // BF16 pairs: 1.5 x 2 + (a denormal) x 1e30-ish = 3 (the denormal counts as zero).
  const uint16_t pa[2] = {RoundToBf16(1.5f), 0x0001};
  const uint16_t pb[2] = {RoundToBf16(2.0f), RoundToBf16(1e30f)};
  tiles.Load<5>(pa, 4);
  tiles.Load<7>(pb, 4);
  tiles.Zero<3>();
  tiles.DotBf16<3, 5, 7>();
  float f = 0;
  tiles.Store<3>(&f, 4);
  EXPECT_EQ(f, 3.0f);
  tiles.Release();
  EXPECT_FALSE(tiles.configured());
}

}  // namespace
}  // namespace sluice::engine::models::encoder
