// The micro-kernels of the encoder's packed GEMM (encoder_gemm.h), included once per instruction
// set by encoder_gemm_generic.cc, encoder_gemm_avx2.cc and encoder_gemm_avx512.cc, each of which
// defines
//   SLUICE_GEMM_NS    the namespace that keeps the copies apart
//   SLUICE_GEMM_NAME  the variant's name
//   SLUICE_GEMM_VEC   floats per vector register (16 AVX-512, 8 AVX2, 4 SSE2 / NEON)
//   SLUICE_GEMM_MR    rows of X per tile
//   SLUICE_GEMM_NP    16-column panels of W per tile (1 or 2)
// and is compiled with its own -m flags (and -ffp-contract=fast, so that acc += a * b is an FMA
// where the instruction set has one). No include guard on purpose; nothing else includes this.
//
// A tile keeps MR x (16 NP / VEC) vector accumulators in registers (AVX-512: 8 x 2 = 16 of its 32
// zmm; AVX2: 6 x 2 = 12 of 16 ymm; SSE2: 4 x 4 = 16 xmm, a few spills), and per k step loads the
// panel's cache line(s) once and broadcasts one X value per row. Written with GCC/Clang vector
// extensions rather than intrinsics: one source for every width, and the compiler's register
// allocation of the fully unrolled fixed-size loops (checked in the disassembly: no spills in the
// AVX-512 and AVX2 loops).

#include <cstdint>

#include "engine/models/encoder/encoder_gemm.h"

namespace sluice::engine::models::encoder::gemm::SLUICE_GEMM_NS {
namespace {

constexpr int kVec = SLUICE_GEMM_VEC;
constexpr int kMr = SLUICE_GEMM_MR;
constexpr int kNp = SLUICE_GEMM_NP;
constexpr int kPerPanel = kPanelWidth / kVec;
static_assert(kPanelWidth % kVec == 0 && kMr <= kMaxRows && (kNp == 1 || kNp == 2));

typedef float Vec __attribute__((vector_size(kVec * sizeof(float))));

inline Vec Load(const float* p) {
  Vec v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

inline void Store(float* p, Vec v) { __builtin_memcpy(p, &v, sizeof v); }

template <int R, int P>
void Tile(int kc, const float* x, int64_t ldx, const float* b, int64_t panel_stride, float* c,
          int64_t ldc, const float* bias, TileInit init, const float* prefetch) {
  constexpr int kNv = P * kPerPanel;
  Vec acc[R][kNv];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int j = 0; j < kNv; ++j) {
      if (init == TileInit::kLoad) {
        acc[r][j] = Load(c + r * ldc + j * kVec);
      } else if (init == TileInit::kBias) {
        acc[r][j] = Load(bias + j * kVec);
      } else {
        acc[r][j] = Vec{};
      }
    }
  }
  const float* rows[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) rows[r] = x + r * ldx;
  const float* b1 = b + panel_stride;
  for (int p = 0; p < kc; ++p) {
    Vec w[kNv];
#pragma GCC unroll 8
    for (int v = 0; v < kPerPanel; ++v) {
      w[v] = Load(b + v * kVec);
      if constexpr (P == 2) w[kPerPanel + v] = Load(b1 + v * kVec);
    }
    if (prefetch != nullptr) {
      // The next tile column's panels, one cache line each per k step (into L2: they are read
      // once the other tiles of this column are done).
      __builtin_prefetch(prefetch, 0, 2);
      if constexpr (P == 2) __builtin_prefetch(prefetch + panel_stride, 0, 2);
      prefetch += kPanelWidth;
    }
    b += kPanelWidth;
    b1 += kPanelWidth;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float a = rows[r][p];
#pragma GCC unroll 8
      for (int j = 0; j < kNv; ++j) acc[r][j] += a * w[j];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int j = 0; j < kNv; ++j) Store(c + r * ldc + j * kVec, acc[r][j]);
  }
}

// 16 values at a time, whatever the vector width (the compiler splits them into its registers).
typedef uint32_t Word16 __attribute__((vector_size(16 * sizeof(uint32_t))));
typedef int32_t Int16 __attribute__((vector_size(16 * sizeof(int32_t))));
typedef float Float16 __attribute__((vector_size(16 * sizeof(float))));

// A BF16 value is the high half of an FP32: each 32-bit word of a pair row holds the lower
// panel's value in its low half (shifted into place) and the upper panel's in its high half (the
// low half cleared), so one load, two integer operations and two stores widen 32 values exactly.
void WidenBf16Pair(const uint16_t* src, int64_t rows, float* lower, float* upper) {
  for (int64_t p = 0; p < rows; ++p) {
    Word16 words;
    __builtin_memcpy(&words, src + 32 * p, sizeof words);
    const Word16 low = words << 16;
    const Word16 high = words & 0xffff0000u;
    __builtin_memcpy(lower + 16 * p, &low, sizeof low);
    __builtin_memcpy(upper + 16 * p, &high, sizeof high);
  }
}

// IEEE binary16 (in the low 16 bits of each word) -> FP32 bits, exactly, in integer and exact
// float operations only (no F16C, no reliance on denormal handling: a subnormal half is its integer
// mantissa times 2^-24, an exact product).
inline Word16 HalfToFloatBits(Word16 x) {
  const Word16 sign = (x & 0x8000u) << 16;
  const Word16 magnitude = x & 0x7fffu;
  // Normal: rebias the exponent (15 -> 127) and move the 10 mantissa bits up by 13.
  const Word16 normal = (magnitude << 13) + (112u << 23);
  // Infinity and NaN: the all-ones exponent, the mantissa (a NaN's payload) kept.
  const Word16 special = (magnitude << 13) | 0x7f800000u;
  const Float16 subnormal_value =
      __builtin_convertvector(__builtin_convertvector(magnitude, Int16), Float16) * 0x1p-24f;
  Word16 subnormal;
  __builtin_memcpy(&subnormal, &subnormal_value, sizeof subnormal);
  const Word16 is_subnormal = (Word16)(magnitude < 0x400u);
  const Word16 is_special = (Word16)(magnitude >= 0x7c00u);
  const Word16 is_normal = ~(is_subnormal | is_special);
  return sign | (normal & is_normal) | (subnormal & is_subnormal) | (special & is_special);
}

void WidenFp16Pair(const uint16_t* src, int64_t rows, float* lower, float* upper) {
  for (int64_t p = 0; p < rows; ++p) {
    Word16 words;
    __builtin_memcpy(&words, src + 32 * p, sizeof words);
    const Word16 low = HalfToFloatBits(words & 0xffffu);
    const Word16 high = HalfToFloatBits(words >> 16);
    __builtin_memcpy(lower + 16 * p, &low, sizeof low);
    __builtin_memcpy(upper + 16 * p, &high, sizeof high);
  }
}

template <int R, int P>
constexpr TileFn Entry() {
  if constexpr (R <= kMr && P <= kNp) {
    return &Tile<R, P>;
  } else {
    return nullptr;
  }
}

}  // namespace

extern const GemmKernel kKernel;
const GemmKernel kKernel = {SLUICE_GEMM_NAME,
                            kMr,
                            kNp,
                            {{Entry<1, 1>(), Entry<1, 2>()},
                             {Entry<2, 1>(), Entry<2, 2>()},
                             {Entry<3, 1>(), Entry<3, 2>()},
                             {Entry<4, 1>(), Entry<4, 2>()},
                             {Entry<5, 1>(), Entry<5, 2>()},
                             {Entry<6, 1>(), Entry<6, 2>()},
                             {Entry<7, 1>(), Entry<7, 2>()},
                             {Entry<8, 1>(), Entry<8, 2>()}},
                            &WidenBf16Pair,
                            &WidenFp16Pair};

}  // namespace sluice::engine::models::encoder::gemm::SLUICE_GEMM_NS
