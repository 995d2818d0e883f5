// The encoder's INT8 GEMM (encoder_gemm.h: WeightFormat::kInt8, a model's `precision: int8`,
// issue 36): weights quantized per output channel at load (PackedWeights::Pack), activations per
// row (token) here, products summed exactly in int32, the result dequantized into FP32.
//
// The arithmetic. W_j = scale_j * w_j with w_j in [-127, 127] (weights symmetric: no weight zero
// point, so no per-row correction term). Activations asymmetric, per row: [lo_i, hi_i] the row's
// range widened to hold 0, xs_i = (hi_i - lo_i) / 255, a zero point z_i = round(-lo_i / xs_i) in
// [0, 255], u = clamp(round(x / xs_i) + z_i, 0, 255), unsigned bytes, VPDPBUSD's left operand
// (u8 x s8 -> s32). The zero point is taken back with the column's sum of int8 weights held
// beside the panels: sum_p u_p w_p - z_i * sum_p w_p = sum_p (u_p - z_i) w_p, exactly, in int32
// (|sum| <= 255 * 127 * K: K up to ~66,000 before int32 could overflow; VPDPBUSD, unlike
// VPDPBUSDS, wraps rather than saturates, and never needs to). Then
// y_ij = fma(float(acc') * scale_j, xs_i, bias_j).
//
// Why per row (token): a token with outliers (BERT's FFN outputs have them) costs only its own
// resolution, and a row's result does not depend on its batch-mates. Why asymmetric: the inputs
// of the FFN's second GEMM are GELU outputs, >= -0.17 and with a long positive tail, for which a
// symmetric range wastes half the 8 bits. Measured on all-MiniLM-L6-v2 against
// sentence-transformers FP32 (1,000 sentences, encoder_precision_test.py): symmetric activations
// (q + 128 over [-max|x|, max|x|]) gave cosine min 0.9898 / mean 0.9967, under the 0.99 /
// 0.998; asymmetric 0.9960 / 0.9987. The cost is one VPMULLD per 16 outputs in the epilogue.
//
// The blocking is the BF16 GEMM's (192-row blocks quantized into a per-thread buffer, 16-panel
// column blocks, 8 x 32 tiles, the first tile of a column prefetching the next column's panels),
// except that K is not blocked: the int32 accumulators stay in registers over the whole K and a
// tile writes its final FP32 values (a K split would need an int32 scratch C). A pair of panels
// for K = 3072 is 96 KiB, which streams from L2 at 2 loads per 16 VPDPBUSD.
//
// Two variants with the same bits (the test checks it): the portable one (generic C++, for CPUs
// without VNNI and as the reference) and AVX512-VNNI (intrinsics in functions with a target
// attribute, as encoder_gemm_bf16.cc, built on x86-64 GCC/Clang; SLUICE_ENCODER_AVX2).

#if SLUICE_ENCODER_AVX2
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/check.h"
#include "engine/models/encoder/encoder_gemm.h"
#include "engine/models/encoder/encoder_gemm_amx.h"
#include "engine/models/encoder/encoder_gemm_panel_pair.h"

namespace sluice::engine::models::encoder::gemm {
namespace {

constexpr int kMr = 8;
constexpr int64_t kMc = 192;
constexpr int kNcPanels = 16;

using Int8TileFn = void (*)(int quads, const uint8_t* x, int64_t ldx, const int8_t* b,
                            int64_t panel_stride, float* c, int64_t ldc, const float* row_scales,
                            const int32_t* row_zero_points, const float* col_scales,
                            const int32_t* col_sums, const float* bias, const int8_t* prefetch);
// rows x k floats of x (row stride ldx) -> u8 in `out` (row stride ldo, a multiple of 64 >= k;
// the values past k are the row's zero point) and each row's scale and zero point.
using QuantizeFn = void (*)(const float* x, int64_t ldx, int64_t rows, int k, uint8_t* out,
                            int64_t ldo, float* scales, int32_t* zero_points);

struct Int8Impl {
  QuantizeFn quantize;
  Int8TileFn tiles[kMr][2];
};

// From a row's range [lo, hi] (lo <= 0 <= hi: zero is exactly representable): 255 / (hi - lo),
// (hi - lo) / 255 and the zero point round(-lo * 255 / (hi - lo)) in [0, 255] (all 0 for a zero
// row, whose values all quantize to 0).
int32_t RowScales(float lo, float hi, float* inv, float* scale) {
  const float range = hi - lo;
  *inv = range > 0.0f ? 255.0f / range : 0.0f;
  *scale = range / 255.0f;
  return static_cast<int32_t>(std::clamp(std::nearbyint(-lo * *inv), 0.0f, 255.0f));
}

void QuantizeGeneric(const float* x, int64_t ldx, int64_t rows, int k, uint8_t* out, int64_t ldo,
                     float* scales, int32_t* zero_points) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * ldx;
    float lo = 0.0f, hi = 0.0f;
    for (int p = 0; p < k; ++p) {
      lo = std::min(lo, row[p]);
      hi = std::max(hi, row[p]);
    }
    float inv = 0.0f;
    const int32_t zp = RowScales(lo, hi, &inv, &scales[r]);
    zero_points[r] = zp;
    uint8_t* dst = out + r * ldo;
    for (int p = 0; p < k; ++p) {
      // nearbyint: to nearest even in the default rounding mode, as VCVTPS2DQ.
      const int q = static_cast<int>(std::nearbyint(row[p] * inv)) + zp;
      dst[p] = static_cast<uint8_t>(std::clamp(q, 0, 255));
    }
    std::fill(dst + k, dst + ldo, static_cast<uint8_t>(zp));
  }
}

template <int R, int P>
void TileGeneric(int quads, const uint8_t* x, int64_t ldx, const int8_t* b, int64_t panel_stride,
                 float* c, int64_t ldc, const float* row_scales, const int32_t* row_zero_points,
                 const float* col_scales, const int32_t* col_sums, const float* bias,
                 const int8_t*) {
  int32_t acc[R][P * kPanelWidth] = {};
  for (int q = 0; q < quads; ++q) {
    for (int j = 0; j < P; ++j) {
      const int8_t* w = b + j * panel_stride + int64_t{q} * 4 * kPanelWidth;
      for (int r = 0; r < R; ++r) {
        const uint8_t* xr = x + r * ldx + 4 * q;
        for (int col = 0; col < kPanelWidth; ++col) {
          int32_t sum = 0;
          for (int t = 0; t < 4; ++t) sum += int32_t{xr[t]} * int32_t{w[4 * col + t]};
          acc[r][j * kPanelWidth + col] += sum;
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int col = 0; col < P * kPanelWidth; ++col) {
      const float v =
          static_cast<float>(acc[r][col] - row_zero_points[r] * col_sums[col]) * col_scales[col];
      c[r * ldc + col] = std::fma(v, row_scales[r], bias[col]);
    }
  }
}

template <int R>
constexpr Int8TileFn GenericEntry(int p) {
  return p == 1 ? &TileGeneric<R, 1> : &TileGeneric<R, 2>;
}

const Int8Impl kGenericImpl = {&QuantizeGeneric,
                               {{GenericEntry<1>(1), GenericEntry<1>(2)},
                                {GenericEntry<2>(1), GenericEntry<2>(2)},
                                {GenericEntry<3>(1), GenericEntry<3>(2)},
                                {GenericEntry<4>(1), GenericEntry<4>(2)},
                                {GenericEntry<5>(1), GenericEntry<5>(2)},
                                {GenericEntry<6>(1), GenericEntry<6>(2)},
                                {GenericEntry<7>(1), GenericEntry<7>(2)},
                                {GenericEntry<8>(1), GenericEntry<8>(2)}}};

#if SLUICE_ENCODER_AVX2
// GCC 12's AVX-512 intrinsics start their unmasked forms from _mm512_undefined_*(), a variable
// initialized from itself, which -Wuninitialized flags once inlined into a target-attribute
// function (a false positive: the masks select every lane).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define SLUICE_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

SLUICE_VNNI_TARGET void QuantizeVnni(const float* x, int64_t ldx, int64_t rows, int k, uint8_t* out,
                                     int64_t ldo, float* scales, int32_t* zero_points) {
  const __m512i lo = _mm512_setzero_si512();
  const __m512i hi = _mm512_set1_epi32(255);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * ldx;
    // Four independent minima and maxima: with one, each step waited for the previous one's
    // VMINPS (4 cycles for 16 values), twice the time of the conversion pass below. Min and max
    // do not depend on the order (x is finite), so the bits are the generic variant's.
    __m512 vmin[4], vmax[4];
#pragma GCC unroll 4
    for (int a = 0; a < 4; ++a) vmin[a] = vmax[a] = _mm512_setzero_ps();
    int p = 0;
    for (; p + 64 <= k; p += 64) {
#pragma GCC unroll 4
      for (int a = 0; a < 4; ++a) {
        const __m512 v = _mm512_loadu_ps(row + p + 16 * a);
        vmin[a] = _mm512_min_ps(vmin[a], v);
        vmax[a] = _mm512_max_ps(vmax[a], v);
      }
    }
    for (; p < k; p += 16) {
      const int left = k - p;
      const __mmask16 mask =
          left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
      const __m512 v = _mm512_maskz_loadu_ps(mask, row + p);  // 0 past k: inside [lo, hi]
      vmin[0] = _mm512_min_ps(vmin[0], v);
      vmax[0] = _mm512_max_ps(vmax[0], v);
    }
    const __m512 lo4 =
        _mm512_min_ps(_mm512_min_ps(vmin[0], vmin[1]), _mm512_min_ps(vmin[2], vmin[3]));
    const __m512 hi4 =
        _mm512_max_ps(_mm512_max_ps(vmax[0], vmax[1]), _mm512_max_ps(vmax[2], vmax[3]));
    float inv = 0.0f;
    const int32_t zp =
        RowScales(_mm512_reduce_min_ps(lo4), _mm512_reduce_max_ps(hi4), &inv, &scales[r]);
    zero_points[r] = zp;
    const __m512i zero_point = _mm512_set1_epi32(zp);
    const __m512 vinv = _mm512_set1_ps(inv);
    uint8_t* dst = out + r * ldo;
    for (p = 0; p + 16 <= k; p += 16) {
      const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(row + p), vinv);
      const __m512i q = _mm512_min_epi32(
          _mm512_max_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(v), zero_point), lo), hi);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + p), _mm512_cvtepi32_epi8(q));
    }
    for (; p < k; p += 16) {
      const int left = k - p;
      const __mmask16 mask =
          left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
      const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, row + p), vinv);
      const __m512i q = _mm512_min_epi32(
          _mm512_max_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(v), zero_point), lo), hi);
      // The lanes past k were 0.0f: the zero point, a zero.
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + p), _mm512_cvtepi32_epi8(q));
    }
    std::fill(dst + p, dst + ldo, static_cast<uint8_t>(zp));
  }
}

// acc += VPDPBUSD(a, w), in place. Why assembly: GCC 12 gives _mm512_dpbusd_epi32 a fresh
// destination, and in the unrolled 8 x 2 tile its register allocator then copied every
// accumulator to another register and back each k step (and spilled two to the stack): 2
// VMOVDQA per VPDPBUSD on the same ports, so the kernel ran at ~65-70% of the instruction's peak.
// The "+v" operand keeps each accumulator in one register for the whole loop.
SLUICE_VNNI_TARGET inline void DotInPlace(__m512i& acc, __m512i a, __m512i w) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(w));
}

template <int R, int P>
SLUICE_VNNI_TARGET void TileVnni(int quads, const uint8_t* x, int64_t ldx, const int8_t* b,
                                 int64_t panel_stride, float* c, int64_t ldc,
                                 const float* row_scales, const int32_t* row_zero_points,
                                 const float* col_scales, const int32_t* col_sums,
                                 const float* bias, const int8_t* prefetch) {
  __m512i acc[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int j = 0; j < P; ++j) acc[r][j] = _mm512_setzero_si512();
  }
  const int8_t* b1 = b + panel_stride;
  for (int q = 0; q < quads; ++q) {
    __m512i w[P];
    w[0] = _mm512_loadu_si512(b);
    if constexpr (P == 2) w[1] = _mm512_loadu_si512(b1);
    if (prefetch != nullptr) {
      __builtin_prefetch(prefetch, 0, 2);
      if constexpr (P == 2) __builtin_prefetch(prefetch + panel_stride, 0, 2);
      prefetch += 4 * kPanelWidth;
    }
    b += 4 * kPanelWidth;
    b1 += 4 * kPanelWidth;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t quad = 0;
      std::memcpy(&quad, x + r * ldx + 4 * q, 4);
      const __m512i a = _mm512_set1_epi32(quad);
#pragma GCC unroll 2
      for (int j = 0; j < P; ++j) DotInPlace(acc[r][j], a, w[j]);
    }
  }
  __m512i sums[P];
  __m512 cs[P], bs[P];
#pragma GCC unroll 2
  for (int j = 0; j < P; ++j) {
    sums[j] = _mm512_loadu_si512(col_sums + j * kPanelWidth);
    cs[j] = _mm512_loadu_ps(col_scales + j * kPanelWidth);
    bs[j] = _mm512_loadu_ps(bias + j * kPanelWidth);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m512 rs = _mm512_set1_ps(row_scales[r]);
    const __m512i zp = _mm512_set1_epi32(row_zero_points[r]);
#pragma GCC unroll 2
    for (int j = 0; j < P; ++j) {
      const __m512i dot = _mm512_sub_epi32(acc[r][j], _mm512_mullo_epi32(zp, sums[j]));
      const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), cs[j]);
      _mm512_storeu_ps(c + r * ldc + j * kPanelWidth, _mm512_fmadd_ps(v, rs, bs[j]));
    }
  }
}

template <int R>
constexpr Int8TileFn VnniEntry(int p) {
  return p == 1 ? &TileVnni<R, 1> : &TileVnni<R, 2>;
}

const Int8Impl kVnniImpl = {&QuantizeVnni,
                            {{VnniEntry<1>(1), VnniEntry<1>(2)},
                             {VnniEntry<2>(1), VnniEntry<2>(2)},
                             {VnniEntry<3>(1), VnniEntry<3>(2)},
                             {VnniEntry<4>(1), VnniEntry<4>(2)},
                             {VnniEntry<5>(1), VnniEntry<5>(2)},
                             {VnniEntry<6>(1), VnniEntry<6>(2)},
                             {VnniEntry<7>(1), VnniEntry<7>(2)},
                             {VnniEntry<8>(1), VnniEntry<8>(2)}}};

// `iters` steps of 12 independent chains of VPDPBUSD (64 multiply-adds each) / VFMADD231PS (16
// each), in assembly as Bf16Speedup's (the measurement is the instruction's, not the compiler's).
#define SLUICE_TWELVE_CHAINS(op)                                         \
  op " %%zmm1, %%zmm0, %%zmm4\n\t" op " %%zmm1, %%zmm0, %%zmm5\n\t" op   \
     " %%zmm1, %%zmm0, %%zmm6\n\t" op " %%zmm1, %%zmm0, %%zmm7\n\t" op   \
     " %%zmm1, %%zmm0, %%zmm8\n\t" op " %%zmm1, %%zmm0, %%zmm9\n\t" op   \
     " %%zmm1, %%zmm0, %%zmm10\n\t" op " %%zmm1, %%zmm0, %%zmm11\n\t" op \
     " %%zmm1, %%zmm0, %%zmm12\n\t" op " %%zmm1, %%zmm0, %%zmm13\n\t" op \
     " %%zmm1, %%zmm0, %%zmm14\n\t" op " %%zmm1, %%zmm0, %%zmm15\n\t"
#define SLUICE_CHAIN_CLOBBERS                                                                \
  "xmm0", "xmm1", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", \
      "xmm13", "xmm14", "xmm15", "cc"

SLUICE_VNNI_TARGET __attribute__((noinline)) void DotChains(int64_t iters) {
  __asm__ volatile(
      "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
      "vpxord %%zmm1, %%zmm1, %%zmm1\n\t"
      "1:\n\t" SLUICE_TWELVE_CHAINS("vpdpbusd") "dec %0\n\t"
      "jnz 1b\n\t"
      : "+r"(iters)
      :
      : SLUICE_CHAIN_CLOBBERS);
}

SLUICE_VNNI_TARGET __attribute__((noinline)) void FmaChains(int64_t iters) {
  __asm__ volatile(
      "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
      "vpxord %%zmm1, %%zmm1, %%zmm1\n\t"
      "1:\n\t" SLUICE_TWELVE_CHAINS("vfmadd231ps") "dec %0\n\t"
      "jnz 1b\n\t"
      : "+r"(iters)
      :
      : SLUICE_CHAIN_CLOBBERS);
}

#undef SLUICE_TWELVE_CHAINS
#undef SLUICE_CHAIN_CLOBBERS

// The AMX kernel's epilogue: TileVnni's instructions, so its bits.
SLUICE_VNNI_TARGET void DequantizeRowsVnni(const int32_t* c, int64_t ldc, int rows, int width,
                                           const float* row_scales, const int32_t* row_zero_points,
                                           const float* col_scales, const int32_t* col_sums,
                                           const float* bias, float* y, int64_t ldy) {
  for (int j = 0; j < width; j += kPanelWidth) {
    const int left = width - j;
    const __mmask16 mask =
        left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
    const __m512i sums = _mm512_maskz_loadu_epi32(mask, col_sums + j);
    const __m512 cs = _mm512_maskz_loadu_ps(mask, col_scales + j);
    const __m512 bs = bias != nullptr ? _mm512_maskz_loadu_ps(mask, bias + j) : _mm512_setzero_ps();
    for (int r = 0; r < rows; ++r) {
      const __m512i acc = _mm512_maskz_loadu_epi32(mask, c + r * ldc + j);
      const __m512i zp = _mm512_set1_epi32(row_zero_points[r]);
      const __m512i dot = _mm512_sub_epi32(acc, _mm512_mullo_epi32(zp, sums));
      const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), cs);
      _mm512_mask_storeu_ps(y + r * ldy + j, mask,
                            _mm512_fmadd_ps(v, _mm512_set1_ps(row_scales[r]), bs));
    }
  }
}
#undef SLUICE_VNNI_TARGET
#pragma GCC diagnostic pop
#endif  // SLUICE_ENCODER_AVX2

const Int8Impl& Impl(Int8Kernel kernel) {
#if SLUICE_ENCODER_AVX2
  if (kernel == Int8Kernel::kAvx512Vnni) {
    CHECK(Int8VnniSupported());
    return kVnniImpl;
  }
#else
  CHECK(kernel == Int8Kernel::kGeneric);
#endif
  return kGenericImpl;
}

}  // namespace

void QuantizeRowsToU8(const float* x, int64_t ldx, int64_t rows, int k, uint8_t* out, int64_t ldo,
                      float* scales, int32_t* zero_points) {
  Impl(Int8VnniSupported() ? Int8Kernel::kAvx512Vnni : Int8Kernel::kGeneric)
      .quantize(x, ldx, rows, k, out, ldo, scales, zero_points);
}

void Int8DequantizeRows(const int32_t* c, int64_t ldc, int rows, int width, const float* row_scales,
                        const int32_t* row_zero_points, const float* col_scales,
                        const int32_t* col_sums, const float* bias, float* y, int64_t ldy) {
#if SLUICE_ENCODER_AVX2
  if (Int8VnniSupported()) {
    DequantizeRowsVnni(c, ldc, rows, width, row_scales, row_zero_points, col_scales, col_sums, bias,
                       y, ldy);
    return;
  }
#endif
  // TileGeneric's arithmetic (acc - zp * sum wraps as VPMULLD / VPSUBD; never in range).
  for (int r = 0; r < rows; ++r) {
    const auto zp = static_cast<uint32_t>(row_zero_points[r]);
    for (int j = 0; j < width; ++j) {
      const auto dot = static_cast<int32_t>(static_cast<uint32_t>(c[r * ldc + j]) -
                                            zp * static_cast<uint32_t>(col_sums[j]));
      const float v = static_cast<float>(dot) * col_scales[j];
      y[r * ldy + j] = std::fma(v, row_scales[r], bias != nullptr ? bias[j] : 0.0f);
    }
  }
}

Int8Kernel Int8For(const GemmKernel& kernel) {
  if (&kernel == &Generic()) return Int8Kernel::kGeneric;
  if (AmxInt8Enabled()) return Int8Kernel::kAmx;
  return Int8VnniSupported() ? Int8Kernel::kAvx512Vnni : Int8Kernel::kGeneric;
}

const char* Int8KernelName(Int8Kernel kernel) {
  switch (kernel) {
    case Int8Kernel::kAvx512Vnni:
      return "avx512-vnni";
    case Int8Kernel::kAmx:
      return "amx";
    case Int8Kernel::kGeneric:
      break;
  }
  return "generic";
}

double Int8Speedup() {
  if (AmxInt8Enabled() && AmxPeakRates().fp32_fma_flops_per_s > 0.0) {
    // The kernel `precision: int8` would run: TDPBUSD's multiply-adds over FMA's.
    return AmxPeakRates().int8_ops_per_s / AmxPeakRates().fp32_fma_flops_per_s;
  }
#if SLUICE_ENCODER_AVX2
  if (!Int8VnniSupported()) return 0.0;
  static const double speedup = [] {
    // As Bf16Speedup: alternated, the best of 7 each.
    constexpr int64_t kIters = 8192;
    double best_int8 = 1e30, best_fp32 = 1e30;
    for (int round = 0; round < 7; ++round) {
      auto start = std::chrono::steady_clock::now();
      DotChains(kIters);
      best_int8 =
          std::min(best_int8,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      start = std::chrono::steady_clock::now();
      FmaChains(kIters);
      best_fp32 =
          std::min(best_fp32,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    // Multiply-adds per step: 12 x 64 (VPDPBUSD) against 12 x 16 (FP32).
    return (4.0 / best_int8) / (1.0 / best_fp32);
  }();
  return speedup;
#else
  return 0.0;
#endif
}

void Int8PanelGemm(Int8Kernel kernel, const float* x, int64_t ldx, int64_t rows,
                   const int8_t* packed, int64_t stride, const float* scales, const int32_t* sums,
                   int n, int k, const float* bias, float* y, int64_t ldy) {
  if (kernel == Int8Kernel::kAmx) {
    const AmxKernels* emulated = AmxKernelsForTest();
    (emulated != nullptr && emulated->int8 != nullptr ? emulated->int8 : &AmxInt8PanelGemm)(
        x, ldx, rows, packed, stride, scales, sums, n, k, bias, y, ldy);
    return;
  }
  const Int8Impl& impl = Impl(kernel);
  const int panels = (n + kPanelWidth - 1) / kPanelWidth;
  const int quads = (k + 3) / 4;
  const int64_t ldb = (int64_t{k} + 63) / 64 * 64;  // byte row stride of the quantized X block
  thread_local std::vector<uint8_t> quantized;
  thread_local std::vector<float> row_scales;
  thread_local std::vector<int32_t> row_zero_points;
  const size_t need = static_cast<size_t>(std::min(kMc, rows) * ldb);
  if (quantized.size() < need) quantized.resize(need);
  if (row_scales.size() < static_cast<size_t>(kMc)) {
    row_scales.resize(kMc);
    row_zero_points.resize(kMc);
  }
  uint8_t* xb = quantized.data();
  alignas(64) static const float kZeros[2 * kPanelWidth] = {};
  alignas(64) float edge_bias[2 * kPanelWidth];
  for (int64_t ic = 0; ic < rows; ic += kMc) {
    const int64_t mc = std::min(kMc, rows - ic);
    impl.quantize(x + ic * ldx, ldx, mc, k, xb, ldb, row_scales.data(), row_zero_points.data());
    for (int jc = 0; jc < panels; jc += kNcPanels) {
      const int jc_end = std::min(panels, jc + kNcPanels);
      for (int jp = jc; jp < jc_end; jp += 2) {
        const PanelPair pair = PanelPairAt(jp, panels, n, bias, kZeros, edge_bias);
        const int8_t* b = packed + jp * stride;
        const int8_t* next = jp + 2 < jc_end   ? b + 2 * stride
                             : jc_end < panels ? packed + jc_end * stride
                                               : nullptr;
        ForEachRowTile<kMr>(mc, pair, y + ic * ldy + pair.col, ldy, false, next,
                            [&](int64_t ir, int mr, float* c, int64_t ldc, const int8_t* pf) {
                              impl.tiles[mr - 1][pair.np - 1](
                                  quads, xb + ir * ldb, ldb, b, stride, c, ldc,
                                  row_scales.data() + ir, row_zero_points.data() + ir,
                                  scales + pair.col, sums + pair.col, pair.bias, pf);
                            });
      }
    }
  }
}

}  // namespace sluice::engine::models::encoder::gemm
