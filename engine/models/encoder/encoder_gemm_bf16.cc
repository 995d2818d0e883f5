// The encoder's BF16 GEMM (encoder_gemm.h: WeightFormat::kBf16, a model's `precision: bf16`,
// issue 36): AVX-512 BF16's VDPBF16PS (_mm512_dpbf16_ps), which multiplies 16 pairs of BF16
// values and adds both products to 16 FP32 accumulators. W is held as BF16 pairs in panels,
// packed once at load (PackedWeights::Pack); X is converted to BF16 (rounded to nearest even,
// VCVTNEPS2BF16) one row block at a time into a per-thread buffer, and the tiles broadcast one
// pair of a row's values per k step. Accumulation, bias and the result stay FP32.
//
// A tile is up to 8 rows x 32 columns (two panels): 16 zmm accumulators, as the AVX-512F FP32
// kernel, but each instruction does two multiply-adds per lane; the blocking is the FP32 GEMM's
// (192-row blocks, 16-panel column blocks, K blocks of <= 256 values, the first tile of a column
// prefetching the next column's panels).
//
// The intrinsics are in functions with a target attribute, not a file-wide -m flag, so that no
// inline function of a standard header is compiled here with AVX-512 and picked by the linker for
// the rest of the program. CMake compiles this file on x86-64 (GCC, Clang) only; encoder_gemm.cc
// calls in only after Bf16Supported().

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/models/encoder/encoder_gemm.h"
#include "engine/models/encoder/encoder_gemm_amx.h"
#include "engine/models/encoder/encoder_gemm_panel_pair.h"

#define SLUICE_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace sluice::engine::models::encoder::gemm {
namespace {

constexpr int kMr = 8;
constexpr int64_t kMc = 192;
constexpr int kNcPanels = 16;
// Pairs (of K values) per K block.
constexpr int kKcPairs = 128;

using Bf16TileFn = void (*)(int pairs, const uint16_t* x, int64_t ldx, const uint16_t* b,
                            int64_t panel_stride, float* c, int64_t ldc, const float* bias,
                            TileInit init, const uint16_t* prefetch);

template <int R, int P>
SLUICE_BF16_TARGET void Tile(int pairs, const uint16_t* x, int64_t ldx, const uint16_t* b,
                             int64_t panel_stride, float* c, int64_t ldc, const float* bias,
                             TileInit init, const uint16_t* prefetch) {
  __m512 acc[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int j = 0; j < P; ++j) {
      if (init == TileInit::kLoad) {
        acc[r][j] = _mm512_loadu_ps(c + r * ldc + j * kPanelWidth);
      } else if (init == TileInit::kBias) {
        acc[r][j] = _mm512_loadu_ps(bias + j * kPanelWidth);
      } else {
        acc[r][j] = _mm512_setzero_ps();
      }
    }
  }
  const uint16_t* b1 = b + panel_stride;
  for (int q = 0; q < pairs; ++q) {
    __m512i w[P];
    w[0] = _mm512_loadu_si512(b);
    if constexpr (P == 2) w[1] = _mm512_loadu_si512(b1);
    if (prefetch != nullptr) {
      __builtin_prefetch(prefetch, 0, 2);
      if constexpr (P == 2) __builtin_prefetch(prefetch + panel_stride, 0, 2);
      prefetch += 2 * kPanelWidth;
    }
    b += 2 * kPanelWidth;
    b1 += 2 * kPanelWidth;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t pair = 0;
      std::memcpy(&pair, x + r * ldx + 2 * q, 4);
      const __m512i a = _mm512_set1_epi32(pair);
#pragma GCC unroll 2
      for (int j = 0; j < P; ++j) {
        acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)a, (__m512bh)w[j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int j = 0; j < P; ++j) _mm512_storeu_ps(c + r * ldc + j * kPanelWidth, acc[r][j]);
  }
}

template <int R>
constexpr Bf16TileFn Entry(int p) {
  return p == 1 ? &Tile<R, 1> : &Tile<R, 2>;
}

const Bf16TileFn kTiles[kMr][2] = {{Entry<1>(1), Entry<1>(2)}, {Entry<2>(1), Entry<2>(2)},
                                   {Entry<3>(1), Entry<3>(2)}, {Entry<4>(1), Entry<4>(2)},
                                   {Entry<5>(1), Entry<5>(2)}, {Entry<6>(1), Entry<6>(2)},
                                   {Entry<7>(1), Entry<7>(2)}, {Entry<8>(1), Entry<8>(2)}};

// rows x k floats of x (row stride ldx) -> BF16 in `out` (row stride ldo >= k rounded up to 16,
// the values past k zero). Masked loads for a row's tail: nothing past x's k values is read.
SLUICE_BF16_TARGET void ConvertRows(const float* x, int64_t ldx, int64_t rows, int k, uint16_t* out,
                                    int64_t ldo) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * ldx;
    uint16_t* dst = out + r * ldo;
    for (int p = 0; p < k; p += 16) {
      const int left = k - p;
      const __mmask16 mask =
          left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
      const __m512 v = _mm512_maskz_loadu_ps(mask, row + p);
      const __m256bh h = _mm512_cvtneps_pbh(v);
      __m256i bits;
      std::memcpy(&bits, &h, sizeof bits);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + p), bits);
    }
  }
}

// `iters` steps of 12 independent chains of VDPBF16PS (64 flops each) / VFMADD231PS (32 flops
// each) on registers: the peak rates Bf16Speedup compares. In assembly, so that the measurement is
// the instruction's and not the compiler's (at clang -O0 the intrinsics' accumulators live in
// memory and the ratio came out 3.3x instead of 0.5x). AT&T operand order: sources, then the
// accumulator.
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

SLUICE_BF16_TARGET __attribute__((noinline)) void DotChains(int64_t iters) {
  __asm__ volatile(
      "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
      "vpxord %%zmm1, %%zmm1, %%zmm1\n\t"
      "1:\n\t" SLUICE_TWELVE_CHAINS("vdpbf16ps") "dec %0\n\t"
      "jnz 1b\n\t"
      : "+r"(iters)
      :
      : SLUICE_CHAIN_CLOBBERS);
}

SLUICE_BF16_TARGET __attribute__((noinline)) void FmaChains(int64_t iters) {
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

}  // namespace

void ConvertRowsToBf16(const float* x, int64_t ldx, int64_t rows, int k, uint16_t* out,
                       int64_t ldo) {
  ConvertRows(x, ldx, rows, k, out, ldo);
}

SLUICE_BF16_TARGET void Bf16StoreRows(const float* c, int64_t ldc, int rows, int width,
                                      const float* bias, float* y, int64_t ldy) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < width; j += kPanelWidth) {
      const int left = width - j;
      const __mmask16 mask =
          left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
      __m512 v = _mm512_maskz_loadu_ps(mask, c + r * ldc + j);
      if (bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, bias + j));
      _mm512_mask_storeu_ps(y + r * ldy + j, mask, v);
    }
  }
}

Bf16Kernel Bf16For() { return AmxBf16Enabled() ? Bf16Kernel::kAmx : Bf16Kernel::kAvx512Bf16; }

const char* Bf16KernelName(Bf16Kernel kernel) {
  return kernel == Bf16Kernel::kAmx ? "amx" : "avx512-bf16";
}

double Bf16Speedup() {
  if (!Bf16Supported()) return 0.0;
  if (AmxBf16Enabled() && AmxPeakRates().fp32_fma_flops_per_s > 0.0) {
    // The kernel `precision: bf16` would run: TDPBF16PS's peak over FMA's.
    return AmxPeakRates().bf16_flops_per_s / AmxPeakRates().fp32_fma_flops_per_s;
  }
  static const double speedup = [] {
    // Each side about 0.1-0.3 ms; alternated, the best of 7 each, so a descheduled run or a
    // busy sibling thread costs one sample, not the decision.
    constexpr int64_t kIters = 8192;
    double best_bf16 = 1e30, best_fp32 = 1e30;
    for (int round = 0; round < 7; ++round) {
      auto start = std::chrono::steady_clock::now();
      DotChains(kIters);
      best_bf16 =
          std::min(best_bf16,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      start = std::chrono::steady_clock::now();
      FmaChains(kIters);
      best_fp32 =
          std::min(best_fp32,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    // Flops per step: 12 x 64 (BF16) against 12 x 32 (FP32).
    return (2.0 / best_bf16) / (1.0 / best_fp32);
  }();
  return speedup;
}

void Bf16PanelGemm(const float* x, int64_t ldx, int64_t rows, const uint16_t* packed,
                   int64_t stride, int n, int k, const float* bias, float* y, int64_t ldy) {
  Bf16PanelGemm(Bf16For(), x, ldx, rows, packed, stride, n, k, bias, y, ldy);
}

void Bf16PanelGemm(Bf16Kernel kernel, const float* x, int64_t ldx, int64_t rows,
                   const uint16_t* packed, int64_t stride, int n, int k, const float* bias,
                   float* y, int64_t ldy) {
  if (kernel == Bf16Kernel::kAmx) {
    const AmxKernels* emulated = AmxKernelsForTest();
    (emulated != nullptr && emulated->bf16 != nullptr ? emulated->bf16 : &AmxBf16PanelGemm)(
        x, ldx, rows, packed, stride, n, k, bias, y, ldy);
    return;
  }
  const int panels = (n + kPanelWidth - 1) / kPanelWidth;
  const int pairs = (k + 1) / 2;
  const int k_blocks = (pairs + kKcPairs - 1) / kKcPairs;
  const int kc_even = (pairs + k_blocks - 1) / k_blocks;
  const int64_t ldb = (int64_t{k} + 15) / 16 * 16;  // BF16 row stride of the converted X block
  thread_local std::vector<uint16_t> converted;
  const size_t need = static_cast<size_t>(std::min(kMc, rows) * ldb);
  if (converted.size() < need) converted.resize(need);
  uint16_t* xb = converted.data();
  alignas(64) float edge_bias[2 * kPanelWidth];
  for (int64_t ic = 0; ic < rows; ic += kMc) {
    const int64_t mc = std::min(kMc, rows - ic);
    ConvertRows(x + ic * ldx, ldx, mc, k, xb, ldb);
    for (int jc = 0; jc < panels; jc += kNcPanels) {
      const int jc_end = std::min(panels, jc + kNcPanels);
      for (int pc = 0; pc < pairs; pc += kc_even) {
        const int kc = std::min(kc_even, pairs - pc);
        const TileInit init = pc > 0            ? TileInit::kLoad
                              : bias != nullptr ? TileInit::kBias
                                                : TileInit::kZero;
        for (int jp = jc; jp < jc_end; jp += 2) {
          const PanelPair pair = PanelPairAt(jp, panels, n, bias, nullptr, edge_bias);
          const uint16_t* b = packed + jp * stride + int64_t{pc} * 2 * kPanelWidth;
          const uint16_t* next = nullptr;
          if (jp + 2 < jc_end) {
            next = b + 2 * stride;
          } else if (pc + kc < pairs) {
            next = packed + jc * stride + int64_t{pc + kc} * 2 * kPanelWidth;
          } else if (jc_end < panels) {
            next = packed + jc_end * stride;
          }
          ForEachRowTile<kMr>(mc, pair, y + ic * ldy + pair.col, ldy, init == TileInit::kLoad, next,
                              [&](int64_t ir, int mr, float* c, int64_t ldc, const uint16_t* pf) {
                                kTiles[mr - 1][pair.np - 1](kc, xb + ir * ldb + 2 * int64_t{pc},
                                                            ldb, b, stride, c, ldc, pair.bias, init,
                                                            pf);
                              });
        }
      }
    }
  }
}

}  // namespace sluice::engine::models::encoder::gemm
