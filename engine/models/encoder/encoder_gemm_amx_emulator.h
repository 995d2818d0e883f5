#pragma once

// A scalar emulator of the AMX tile instructions the encoder's AMX GEMMs use (the Tiles layer of
// encoder_gemm_amx_kernel.h), after Intel's documented semantics, so that the kernels' blocking,
// tiling and edge handling are tested on CPUs without AMX. For tests only: nothing in the
// production library includes it.
//
// What it models. Eight tiles of up to 16 rows x 64 bytes; LDTILECFG palette 1 (rows and bytes
// per row per tile; loading a configuration zeroes every tile); TILELOADD / TILESTORED of the
// configured rows x bytes at base + row x stride; TILEZERO. TDPBUSD: C[m][n] += sum over the
// K/4 dwords k of sum_t u8(A[m][4k + t]) x s8(B[k][4n + t]), in int32 (wrapping, never reached
// here): exact, so the AMX INT8 product must equal the VNNI kernel's bit for bit. TDPBF16PS:
// per k, C[m][n] += A[m][2k] x B[k][2n], then += A[m][2k + 1] x B[k][2n + 1], each an FP32
// accumulation rounded to nearest even, input BF16 denormals treated as zero and FP32 denormal
// results flushed to zero, as Intel's pseudocode; the hardware's internal order may differ
// (bitwise equality is not claimed, a tight tolerance against the FP32 product is). It checks
// the shape conditions under which the instructions fault (#UD): a configuration loaded, rows
// and bytes per row of C, A and B consistent, at most 16 rows of B.
//
// Thread-safety: one object per thread (the tile state is per thread on hardware too).

#include <cstdint>
#include <cstring>

#include "common/check.h"
#include "engine/models/encoder/encoder_gemm_amx_kernel.h"

namespace sluice::engine::models::encoder::gemm::amx {

class EmulatedTiles {
 public:
  void Configure(const TileConfig& config) {
    CHECK(config.palette_id == 1);
    config_ = config;
    configured_ = true;
    for (int t = 0; t < 8; ++t) {
      CHECK(config.rows[t] <= kTileRows && config.colsb[t] <= kTileBytes);
    }
    std::memset(tiles_, 0, sizeof tiles_);
    ++configures_;
  }
  void Release() {
    configured_ = false;
    std::memset(tiles_, 0, sizeof tiles_);
  }
  template <int T>
  void Zero() {
    CheckConfigured(T);
    std::memset(tiles_[T], 0, sizeof tiles_[T]);
  }
  template <int T>
  void Load(const void* base, int64_t stride) {
    CheckConfigured(T);
    for (int r = 0; r < config_.rows[T]; ++r) {
      std::memcpy(tiles_[T][r], static_cast<const uint8_t*>(base) + r * stride, config_.colsb[T]);
    }
  }
  template <int T>
  void Store(void* base, int64_t stride) {
    CheckConfigured(T);
    for (int r = 0; r < config_.rows[T]; ++r) {
      std::memcpy(static_cast<uint8_t*>(base) + r * stride, tiles_[T][r], config_.colsb[T]);
    }
  }
  template <int C, int A, int B>
  void DotU8S8() {
    const int k_dwords = CheckDotShapes(C, A, B);
    for (int m = 0; m < config_.rows[C]; ++m) {
      for (int n = 0; n < config_.colsb[C] / 4; ++n) {
        uint32_t acc = Dword(C, m, n);
        const uint8_t* a = tiles_[A][m];
        for (int k = 0; k < k_dwords; ++k) {
          const uint8_t* b = tiles_[B][k] + 4 * n;
          for (int t = 0; t < 4; ++t) {
            acc +=
                static_cast<uint32_t>(int32_t{a[4 * k + t]} * int32_t{static_cast<int8_t>(b[t])});
          }
        }
        SetDword(C, m, n, acc);
      }
    }
  }
  template <int C, int A, int B>
  void DotBf16() {
    const int k_dwords = CheckDotShapes(C, A, B);
    // The BF16 operands widened once (the tests build at -O0, under sanitizers too).
    float a[kTileRows][kTileBytes / 2], b[kTileRows][kTileBytes / 2];
    for (int m = 0; m < config_.rows[A]; ++m) {
      for (int i = 0; i < 2 * k_dwords; ++i) a[m][i] = Bf16(A, m, i);
    }
    for (int k = 0; k < k_dwords; ++k) {
      for (int i = 0; i < config_.colsb[B] / 2; ++i) b[k][i] = Bf16(B, k, i);
    }
    for (int m = 0; m < config_.rows[C]; ++m) {
      for (int n = 0; n < config_.colsb[C] / 4; ++n) {
        float acc = std::bit_cast<float>(Dword(C, m, n));
        for (int k = 0; k < k_dwords; ++k) {
          // The product of two BF16 values (8-bit significands) is exact in FP32, so each
          // multiply-add rounds once, as the instruction's.
          acc = FlushDenormal(acc + a[m][2 * k] * b[k][2 * n]);
          acc = FlushDenormal(acc + a[m][2 * k + 1] * b[k][2 * n + 1]);
        }
        SetDword(C, m, n, std::bit_cast<uint32_t>(acc));
      }
    }
  }

  int configures() const { return configures_; }
  bool configured() const { return configured_; }

 private:
  void CheckConfigured(int t) const { CHECK(configured_ && config_.rows[t] > 0); }
  // The #UD conditions of TDPBF16PS / TDPBUSD; returns K in dwords.
  int CheckDotShapes(int c, int a, int b) const {
    CheckConfigured(c);
    CheckConfigured(a);
    CheckConfigured(b);
    CHECK(config_.rows[c] == config_.rows[a]);
    CHECK(config_.colsb[a] / 4 == config_.rows[b]);
    CHECK(config_.colsb[c] == config_.colsb[b]);
    return config_.colsb[a] / 4;
  }
  uint32_t Dword(int t, int row, int n) const {
    uint32_t v = 0;
    std::memcpy(&v, tiles_[t][row] + 4 * n, 4);
    return v;
  }
  void SetDword(int t, int row, int n, uint32_t v) { std::memcpy(tiles_[t][row] + 4 * n, &v, 4); }
  float Bf16(int t, int row, int index) const {
    uint16_t bits = 0;
    std::memcpy(&bits, tiles_[t][row] + 2 * index, 2);
    if ((bits & 0x7f80) == 0) bits &= 0x8000;  // a denormal input counts as zero
    return std::bit_cast<float>(uint32_t{bits} << 16);
  }
  static float FlushDenormal(float v) {
    constexpr float kMinNormal = 1.17549435e-38f;  // FLT_MIN
    return v != 0.0f && v > -kMinNormal && v < kMinNormal ? (v < 0.0f ? -0.0f : 0.0f) : v;
  }

  TileConfig config_;
  bool configured_ = false;
  int configures_ = 0;
  uint8_t tiles_[8][kTileRows][kTileBytes] = {};
};

// The AMX products on the emulator: AmxKernels' signatures, one emulator per call (so per thread
// of a pooled product, as the hardware's per-thread tile state).
inline void EmulatedAmxBf16(const float* x, int64_t ldx, int64_t rows, const uint16_t* panels,
                            int64_t panel_stride, int n, int k, const float* bias, float* y,
                            int64_t ldy) {
  EmulatedTiles tiles;
  AmxBf16Gemm(tiles, x, ldx, rows, panels, panel_stride, n, k, bias, y, ldy);
  CHECK(!tiles.configured());  // released at the end
}
inline void EmulatedAmxInt8(const float* x, int64_t ldx, int64_t rows, const int8_t* panels,
                            int64_t panel_stride, const float* scales, const int32_t* sums, int n,
                            int k, const float* bias, float* y, int64_t ldy) {
  EmulatedTiles tiles;
  AmxInt8Gemm(tiles, x, ldx, rows, panels, panel_stride, scales, sums, n, k, bias, y, ldy);
  CHECK(!tiles.configured());
}

}  // namespace sluice::engine::models::encoder::gemm::amx
