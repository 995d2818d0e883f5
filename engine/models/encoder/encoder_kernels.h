#pragma once

// The element-wise kernels of the CPU encoder (everything between its GEMMs): bias + activation,
// masked softmax, bias + residual + LayerNorm. Written as plain loops that the compiler
// vectorizes, with branch-free polynomial erf and exp in place of libm's scalar erff/expf (which
// took ~25% of a MiniLM forward pass before). The same source is compiled twice: once for the
// build's baseline x86-64 (SSE2, 4 lanes) and, on x86-64, once with AVX2 + FMA (8 lanes) and once
// with AVX-512F (16 lanes); Get() picks a wider table at run time only where the CPU reports its
// instructions, so the binary runs on any x86-64 machine.
//
// Accuracy (measured over a dense grid against double-precision erf/exp in
// encoder_kernels_test.cc; every table):
//   Erf: max |error| <= 1.5e-7 over all floats (float erf near 1 cannot do better than 6e-8);
//   GELU (erf form): computed as x/2 (1 + erf(x/sqrt 2)) with 1 + erf taken as erfc(-z) for z <
//     -1, so its relative error stays <= 1e-6 also where 1 + erf is tiny (torch's float GELU
//     rounds to 0 there); below x = -1 the bound grows as x^2/2, the condition of exp(-x^2/2)
//     under the float rounding of x^2;
//   Exp: max relative error <= 3e-7 for inputs in [-87.3, 88], 0 below -87.3 (the softmax's masked
//     keys, -inf, get exactly 0).
// The tables differ only in rounding (FMA contraction), never in the order of any reduction,
// so a sequence's result does not depend on its batch-mates on any.

#include <cstdint>

#include "engine/models/encoder/encoder_network.h"

namespace sluice::engine::models::encoder::kernels {

struct KernelTable {
  const char* name;  // "avx2-fma" or "generic"

  // values[r] = act(values[r] + bias) for `rows` rows of `width`.
  void (*bias_activate)(float* values, const float* bias, int64_t rows, int width,
                        HiddenActivation activation);
  // For each of `rows` rows of `n` scores: softmax(scale * row + mask_add), where mask_add[j] is 0
  // for an attended key and -inf for a masked one (weight exactly 0). At least one key is
  // attended. (The attention's 1/sqrt(d) rides here, not on the score GEMM.)
  void (*masked_softmax)(float* scores, const float* mask_add, int rows, int n, float scale);
  // x[r] = LayerNorm(x[r] + y[r] + bias) (biased variance, as torch), each row read from memory
  // once (the mean and variance passes run over the row while it is in L1).
  void (*bias_residual_layer_norm)(const float* y, const float* bias, const float* gamma,
                                   const float* beta, int64_t rows, int width, float eps, float* x);
  // x[r] = LayerNorm(x[r]).
  void (*layer_norm)(float* x, const float* gamma, const float* beta, int64_t rows, int width,
                     float eps);
  // out[i] = erf(in[i]) / exp(in[i]): the scalar functions the kernels use, for the accuracy tests.
  void (*erf)(const float* in, float* out, int64_t n);
  void (*exp)(const float* in, float* out, int64_t n);
};

// The table this CPU runs best: AVX-512F, else AVX2 + FMA where built and supported, else
// generic; the environment variable SLUICE_ENCODER_KERNELS=generic|avx2-fma|avx512f forces one
// (where the CPU has it). Chosen once.
const KernelTable& Get();
// The baseline table (always available).
const KernelTable& Generic();
// The AVX2 + FMA table, or nullptr where it is not built (non-x86-64) or the CPU lacks AVX2/FMA.
const KernelTable* Avx2Fma();
// The AVX-512F table (16 lanes), or nullptr where it is not built or the CPU lacks AVX-512F/FMA.
const KernelTable* Avx512();

}  // namespace sluice::engine::models::encoder::kernels
