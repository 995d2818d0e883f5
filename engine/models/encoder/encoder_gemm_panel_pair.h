#pragma once

// What the BF16 and INT8 GEMMs' blocking shares (encoder_gemm_bf16.cc, encoder_gemm_int8.cc):
// the pair of panels a tile covers, and the MR-row tiles of an M block over it, in place where
// the pair is whole, else through an edge buffer (the tiles always write whole panels).

#include <algorithm>
#include <cstdint>

#include "engine/models/encoder/encoder_gemm.h"

namespace sluice::engine::models::encoder::gemm {

// The panels jp (and jp + 1 where there is one) of `panels`: np of them, the first column, the
// width of Y they cover (less than np x 16 at the last, partial, panel) and the bias the tiles
// read: bias + col, a zero-padded copy in edge_bias where the pair is partial, or if_null.
struct PanelPair {
  int np;
  int col;
  int width;
  const float* bias;
};
inline PanelPair PanelPairAt(int jp, int panels, int n, const float* bias, const float* if_null,
                             float (&edge_bias)[2 * kPanelWidth]) {
  PanelPair pair;
  pair.np = std::min(2, panels - jp);
  pair.col = jp * kPanelWidth;
  pair.width = std::min(pair.np * kPanelWidth, n - pair.col);
  pair.bias = bias != nullptr ? bias + pair.col : if_null;
  if (bias != nullptr && pair.width < pair.np * kPanelWidth) {
    std::fill_n(edge_bias, 2 * kPanelWidth, 0.0f);
    std::copy_n(bias + pair.col, pair.width, edge_bias);
    pair.bias = edge_bias;
  }
  return pair;
}

// Calls tile(ir, mr, c, ldc, prefetch) for each tile of up to kMr rows of an mc-row block over the
// pair's columns of y (row stride ldy): c = y's rows in place where the pair is whole (the first
// tile given `next`, the panels to prefetch), else an edge buffer of np x 16 columns, loaded from y
// first where `accumulate` and copied back after.
template <int kMr, typename Next, typename Tile>
void ForEachRowTile(int64_t mc, const PanelPair& pair, float* y, int64_t ldy, bool accumulate,
                    const Next* next, Tile tile) {
  alignas(64) float edge[kMr * 2 * kPanelWidth];
  const int ld = pair.np * kPanelWidth;
  for (int64_t ir = 0; ir < mc; ir += kMr) {
    const int mr = static_cast<int>(std::min<int64_t>(kMr, mc - ir));
    float* yt = y + ir * ldy;
    if (pair.width == ld) {
      tile(ir, mr, yt, ldy, ir == 0 ? next : nullptr);
      continue;
    }
    if (accumulate) {
      for (int r = 0; r < mr; ++r) std::copy_n(yt + r * ldy, pair.width, edge + r * ld);
    }
    tile(ir, mr, edge, int64_t{ld}, static_cast<const Next*>(nullptr));
    for (int r = 0; r < mr; ++r) std::copy_n(edge + r * ld, pair.width, yt + r * ldy);
  }
}

}  // namespace sluice::engine::models::encoder::gemm
