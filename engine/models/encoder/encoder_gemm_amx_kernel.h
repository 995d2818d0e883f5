#pragma once

// The AMX GEMMs' blocking (encoder_gemm_amx.h), written once over a tile-operations layer
// `Tiles`, so that one kernel runs on the tile hardware (encoder_gemm_amx.cc) and, in tests, on a
// scalar emulator (encoder_gemm_amx_emulator.h). A Tiles type provides, for tile registers given
// as template arguments (the intrinsics name them by number at compile time):
//   void Configure(const TileConfig&);      LDTILECFG (zeroes every tile)
//   void Release();                          TILERELEASE
//   template <int T> void Zero();            TILEZERO
//   template <int T> void Load(const void* base, int64_t stride_bytes);    TILELOADD
//   template <int T> void Store(void* base, int64_t stride_bytes);         TILESTORED
//   template <int C, int A, int B> void DotBf16();   TDPBF16PS C += A . B
//   template <int C, int A, int B> void DotU8S8();   TDPBUSD   C += A(u8) . B(s8)
//
// The tiles: every one 16 rows x 64 bytes (one configuration for every shape, loaded once per
// product). C[m][j] = tile 2m + j (16 rows x 16 FP32 / int32), A[m] = 4 + m (16 rows of X, 32
// BF16 or 64 u8 of K), B[j] = 6 + j (16 pair / quad rows of panel j): a step of K is 2 A loads, 2
// B loads and 4 dot products on a 32 x 32 block of Y. The blocking is the AVX-512 kernels' M block
// (192 rows, converted or quantized once into a per-thread buffer), with K whole in the tiles.
//
// Edges. M: the X buffer is padded with zero rows to a multiple of 16 and a last block of <= 16
// rows uses one A tile; C goes through a 32 x 32 scratch, from which the AVX-512 kernels'
// epilogue arithmetic (Bf16StoreRows, Int8DequantizeRows) writes only the valid rows and columns.
// N: an odd last panel uses one B tile; columns past n are the panels' zero padding. K: a
// panel has ceil(K / 2) pair (ceil(K / 4) quad) rows, not a multiple of 16, so the last step's B
// rows come from a zero-padded copy (reading on would cross into the next panel, or past the last
// one); the X buffer's rows are padded to 64 bytes with zeros (BF16) or the zero point (u8, times
// those zero weights).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/models/encoder/encoder_gemm.h"
#include "engine/models/encoder/encoder_gemm_amx.h"

namespace sluice::engine::models::encoder::gemm::amx {

// LDTILECFG's 64-byte operand, palette 1: per tile register its bytes per row and rows.
struct TileConfig {
  uint8_t palette_id = 0;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

inline constexpr int kTileRows = 16;
inline constexpr int kTileBytes = 64;
inline constexpr int kBlockRows = 2 * kTileRows;  // rows of Y per tile block (two A tiles)
inline constexpr int64_t kMc = 192;               // rows per M block, the AVX-512 kernels'

// Tiles 0-7 all 16 x 64 bytes.
inline TileConfig FullTiles() {
  TileConfig config;
  config.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = kTileBytes;
    config.rows[t] = kTileRows;
  }
  return config;
}

// C[0..M) x [0..P) += A . B over `steps` K steps; the result (32 x 32 FP32 or int32, row stride
// 128 bytes) stored at c. a: the first A row (row stride lda bytes); b: the panel's first B row
// (the second panel panel_bytes on); steps >= full_steps; step s >= full_steps reads B from
// tail (two 1 KiB zero-padded copies, one per panel).
template <typename Tiles, bool kInt8, int M, int P>
void TileBlock(Tiles& t, int steps, int full_steps, const uint8_t* a, int64_t lda, const uint8_t* b,
               int64_t panel_bytes, const uint8_t* tail, void* c) {
  t.template Zero<0>();
  if constexpr (P == 2) t.template Zero<1>();
  if constexpr (M == 2) t.template Zero<2>();
  if constexpr (M == 2 && P == 2) t.template Zero<3>();
  constexpr int64_t kStepBytes = int64_t{kTileRows} * kTileBytes;
  for (int s = 0; s < steps; ++s) {
    const uint8_t* b0 = s < full_steps ? b + s * kStepBytes : tail;
    const uint8_t* b1 = s < full_steps ? b + panel_bytes + s * kStepBytes : tail + kStepBytes;
    t.template Load<4>(a + s * kTileBytes, lda);
    if constexpr (M == 2) t.template Load<5>(a + kTileRows * lda + s * kTileBytes, lda);
    t.template Load<6>(b0, kTileBytes);
    if constexpr (P == 2) t.template Load<7>(b1, kTileBytes);
    if constexpr (kInt8) {
      t.template DotU8S8<0, 4, 6>();
      if constexpr (P == 2) t.template DotU8S8<1, 4, 7>();
      if constexpr (M == 2) t.template DotU8S8<2, 5, 6>();
      if constexpr (M == 2 && P == 2) t.template DotU8S8<3, 5, 7>();
    } else {
      t.template DotBf16<0, 4, 6>();
      if constexpr (P == 2) t.template DotBf16<1, 4, 7>();
      if constexpr (M == 2) t.template DotBf16<2, 5, 6>();
      if constexpr (M == 2 && P == 2) t.template DotBf16<3, 5, 7>();
    }
  }
  constexpr int64_t ldc = 2 * kTileBytes;
  uint8_t* cb = static_cast<uint8_t*>(c);
  t.template Store<0>(cb, ldc);
  if constexpr (P == 2) t.template Store<1>(cb + kTileBytes, ldc);
  if constexpr (M == 2) t.template Store<2>(cb + kTileRows * ldc, ldc);
  if constexpr (M == 2 && P == 2) t.template Store<3>(cb + kTileRows * ldc + kTileBytes, ldc);
}

template <typename Tiles, bool kInt8>
void TileBlockFor(Tiles& t, int m_tiles, int np, int steps, int full_steps, const uint8_t* a,
                  int64_t lda, const uint8_t* b, int64_t panel_bytes, const uint8_t* tail,
                  void* c) {
  using Fn = void (*)(Tiles&, int, int, const uint8_t*, int64_t, const uint8_t*, int64_t,
                      const uint8_t*, void*);
  static constexpr Fn kBlocks[2][2] = {
      {&TileBlock<Tiles, kInt8, 1, 1>, &TileBlock<Tiles, kInt8, 1, 2>},
      {&TileBlock<Tiles, kInt8, 2, 1>, &TileBlock<Tiles, kInt8, 2, 2>}};
  kBlocks[m_tiles - 1][np - 1](t, steps, full_steps, a, lda, b, panel_bytes, tail, c);
}

// The loop both products share: M blocks of kMc rows prepared by `prepare(ic, mc, buffer)` into
// the buffer (row stride lda bytes, rows up to mc rounded to 16), then every pair of panels
// against every 32-row block, `epilogue(row0, rows, col, width, c)` writing Y from the scratch C.
// `rows_per_step` K values per B row (2 BF16, 4 int8); `panel_bytes` between panels.
template <typename Tiles, bool kInt8, typename Prepare, typename Epilogue>
void BlockedProduct(Tiles& t, int64_t rows, int n, int k, int per_row, const uint8_t* packed,
                    int64_t panel_bytes, int64_t lda, Prepare prepare, Epilogue epilogue) {
  const int panels = (n + kPanelWidth - 1) / kPanelWidth;
  const int b_rows = (k + per_row - 1) / per_row;
  const int full_steps = b_rows / kTileRows;
  const int tail_rows = b_rows % kTileRows;
  const int steps = full_steps + (tail_rows > 0 ? 1 : 0);
  constexpr int64_t kStepBytes = int64_t{kTileRows} * kTileBytes;
  thread_local std::vector<uint8_t> buffer;
  const size_t need =
      static_cast<size_t>((std::min(kMc, rows) + kTileRows - 1) / kTileRows * kTileRows * lda);
  if (buffer.size() < need) buffer.resize(need);
  alignas(64) uint8_t tail[2 * kStepBytes];
  alignas(64) int32_t c[kBlockRows * 2 * kPanelWidth];
  t.Configure(FullTiles());
  for (int64_t ic = 0; ic < rows; ic += kMc) {
    const int64_t mc = std::min(kMc, rows - ic);
    prepare(ic, mc, buffer.data());
    // Rows mc .. mc rounded to 16: read by the last A tile, their results never written.
    const int64_t padded = (mc + kTileRows - 1) / kTileRows * kTileRows;
    std::fill(buffer.data() + mc * lda, buffer.data() + padded * lda, uint8_t{0});
    for (int jp = 0; jp < panels; jp += 2) {
      const int np = std::min(2, panels - jp);
      const int col = jp * kPanelWidth;
      const int width = std::min(np * kPanelWidth, n - col);
      const uint8_t* b = packed + jp * panel_bytes;
      if (tail_rows > 0) {
        std::memset(tail, 0, sizeof tail);
        for (int j = 0; j < np; ++j) {
          std::memcpy(tail + j * kStepBytes, b + j * panel_bytes + full_steps * kStepBytes,
                      static_cast<size_t>(tail_rows) * kTileBytes);
        }
      }
      for (int64_t ir = 0; ir < mc; ir += kBlockRows) {
        const int block = static_cast<int>(std::min<int64_t>(kBlockRows, mc - ir));
        TileBlockFor<Tiles, kInt8>(t, block > kTileRows ? 2 : 1, np, steps, full_steps,
                                   buffer.data() + ir * lda, lda, b, panel_bytes, tail, c);
        epilogue(ir, ic + ir, block, col, width, c);
      }
    }
  }
  t.Release();
}

// Bf16PanelGemm's product on `Tiles` (panel_stride in 16-bit values, as Bf16PanelGemm's).
// REQUIRES Bf16Supported() (the activations' conversion is the AVX-512 kernel's).
template <typename Tiles>
void AmxBf16Gemm(Tiles& t, const float* x, int64_t ldx, int64_t rows, const uint16_t* packed,
                 int64_t panel_stride, int n, int k, const float* bias, float* y, int64_t ldy) {
  const int64_t ld = (int64_t{k} + 31) / 32 * 32;  // BF16 values per buffer row: 64-byte rows
  const int64_t converted = (int64_t{k} + 15) / 16 * 16;
  auto prepare = [&](int64_t ic, int64_t mc, uint8_t* buffer) {
    auto* xb = reinterpret_cast<uint16_t*>(buffer);
    ConvertRowsToBf16(x + ic * ldx, ldx, mc, k, xb, ld);
    for (int64_t r = 0; r < mc; ++r) std::fill(xb + r * ld + converted, xb + (r + 1) * ld, 0);
  };
  auto epilogue = [&](int64_t, int64_t row0, int block, int col, int width, const int32_t* c) {
    Bf16StoreRows(reinterpret_cast<const float*>(c), 2 * kPanelWidth, block, width,
                  bias != nullptr ? bias + col : nullptr, y + row0 * ldy + col, ldy);
  };
  BlockedProduct<Tiles, false>(t, rows, n, k, 2, reinterpret_cast<const uint8_t*>(packed),
                               panel_stride * 2, ld * 2, prepare, epilogue);
}

// Int8PanelGemm's product on `Tiles` (panel_stride in bytes): the same quantization and the same
// epilogue arithmetic as the VNNI and generic kernels, so the same bits (the int32 sums are
// exact whatever the order).
template <typename Tiles>
void AmxInt8Gemm(Tiles& t, const float* x, int64_t ldx, int64_t rows, const int8_t* packed,
                 int64_t panel_stride, const float* scales, const int32_t* sums, int n, int k,
                 const float* bias, float* y, int64_t ldy) {
  const int64_t ld = (int64_t{k} + 63) / 64 * 64;
  thread_local std::vector<float> row_scales(kMc);
  thread_local std::vector<int32_t> row_zero_points(kMc);
  auto prepare = [&](int64_t ic, int64_t mc, uint8_t* buffer) {
    QuantizeRowsToU8(x + ic * ldx, ldx, mc, k, buffer, ld, row_scales.data(),
                     row_zero_points.data());
  };
  auto epilogue = [&](int64_t ir, int64_t row0, int block, int col, int width, const int32_t* c) {
    Int8DequantizeRows(c, 2 * kPanelWidth, block, width, row_scales.data() + ir,
                       row_zero_points.data() + ir, scales + col, sums + col,
                       bias != nullptr ? bias + col : nullptr, y + row0 * ldy + col, ldy);
  };
  BlockedProduct<Tiles, true>(t, rows, n, k, 4, reinterpret_cast<const uint8_t*>(packed),
                              panel_stride, ld, prepare, epilogue);
}

}  // namespace sluice::engine::models::encoder::gemm::amx
