// The bodies of the encoder's element-wise kernels (encoder_kernels.h), included once per
// instruction set by encoder_kernels_generic.cc and encoder_kernels_avx2.cc, each of which defines
// SLUICE_ENCODER_KERNEL_NS (the namespace that keeps the two copies apart) and is compiled with
// its own -m flags. No include guard on purpose; nothing else includes this file.
//
// Everything is written for the auto-vectorizer: element-wise loops without calls or branches
// (selects instead), reductions into kLanes independent accumulators (a fixed-size inner loop
// the SLP vectorizer turns into vector adds), so that the same source gives 4-lane SSE2 and
// 8-lane AVX2 code with the same summation order.
//
// The polynomial coefficients were fitted for this file (Lawson-weighted least squares, a minimax
// fit in float64, then rounded to float); encoder_kernels_test.cc checks the float results
// against double-precision erf/exp. Each function states its range and error.

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "engine/models/encoder/encoder_kernels.h"

namespace sluice::engine::models::encoder::kernels::SLUICE_ENCODER_KERNEL_NS {
namespace {

// Accumulators per reduction: two AVX2 vectors or four SSE vectors, enough to hide the add
// latency. Every table uses the same number, hence the same order of additions.
constexpr int kLanes = 16;

// kLanes floats as one GCC/Clang vector (one zmm with AVX-512, two ymm with AVX2, four xmm with
// SSE2), for the loops GCC 12 leaves scalar when written per element: a loop that stores into one
// array while it takes a running max is not vectorized (the select on a float comparison stays a
// scalar compare and branch-free integer move), and that was most of the softmax's time.
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t LaneMask __attribute__((vector_size(kLanes * sizeof(int32_t))));

inline Lanes LoadLanes(const float* p) {
  Lanes v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

inline void StoreLanes(float* p, Lanes v) { __builtin_memcpy(p, &v, sizeof v); }

inline Lanes Splat(float value) {
  Lanes v;
  for (int l = 0; l < kLanes; ++l) v[l] = value;
  return v;
}

// a > b ? a : b per lane, the scalar code's rule (b where either is NaN).
inline Lanes LaneMax(Lanes a, Lanes b) {
  const LaneMask greater = a > b;
  return (Lanes)((greater & (LaneMask)a) | (~greater & (LaneMask)b));
}

// exp(y) for y in [-87.3, 88]; 0 below (exp(-87.3) is the smallest normal float); above 88 it
// returns exp(88) (no caller needs more: the softmax's inputs are <= 0, the sigmoid's saturate).
// exp(y) = 2^n exp(r), n = round(y / ln 2), r = y - n ln 2 in [-ln2/2, ln2/2] (ln 2 split in two
// so that n ln 2 is exact), exp(r) by a degree-6 polynomial (relative error 1.9e-9 in exact
// arithmetic), 2^n built in the exponent bits. Max relative error ~2e-7 in float.
inline float Exp(float y) {
  constexpr float kMin = -87.3f;
  constexpr float kMax = 88.0f;
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // 12 significant bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723212e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  // Written so that a NaN clamps to kMin (a finite n: the int conversion below is undefined for
  // NaN) and is handed back as NaN at the end.
  const float c = y > kMin ? (y < kMax ? y : kMax) : kMin;
  const float n = (c * kLog2e + kRound) - kRound;
  float r = c - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = 0.00138368341f;
  p = p * r + 0.00837481581f;
  p = p * r + 0.0416682251f;
  p = p * r + 0.166664198f;
  p = p * r + 0.499999911f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t exponent = (static_cast<int32_t>(n) + 127) << 23;
  const float result = p * std::bit_cast<float>(exponent);
  return y < kMin ? 0.0f : (y == y ? result : y);
}

// erfc(a) for a >= 1 (0 past ~9.2, where it underflows): exp(-a^2) erfcx(a), erfcx by a rational
// function fitted on [1, 10] (relative error 1.2e-8). The argument of the rational is clamped to
// 10 so that its powers stay finite where exp(-a^2) is already 0.
inline float ErfcLarge(float a) {
  const float t = a < 10.0f ? a : 10.0f;
  float p = 0.155946821f;
  p = p * t + 0.607420564f;
  p = p * t + 1.16733515f;
  p = p * t + 0.998908222f;
  float q = 0.276412874f;
  q = q * t + 1.07647061f;
  q = q * t + 2.20958519f;
  q = q * t + 2.28908253f;
  q = q * t + 1.0f;
  return Exp(-(a * a)) * (p / q);
}

// erf(z) for |z| < 1: z P(z^2), degree 5 in z^2 (error 1.9e-8 in exact arithmetic).
inline float ErfSmall(float z) {
  const float t = z * z;
  float p = -0.000546290597f;
  p = p * t + 0.00487069786f;
  p = p * t + -0.0266638044f;
  p = p * t + 0.112780638f;
  p = p * t + -0.376119375f;
  p = p * t + 1.12837887f;
  return z * p;
}

inline float Erf(float z) {
  const float a = std::fabs(z);
  const float small = ErfSmall(z);
  const float c = ErfcLarge(a);
  const float large = z < 0.0f ? c - 1.0f : 1.0f - c;
  return a < 1.0f ? small : large;
}

// 1 + erf(z), without the cancellation of 1 + (-0.9999...) for negative z: erfc(-z).
inline float OnePlusErf(float z) {
  const float a = std::fabs(z);
  const float small = 1.0f + ErfSmall(z);
  const float c = ErfcLarge(a);
  const float large = z < 0.0f ? c : 2.0f - c;
  return a < 1.0f ? small : large;
}

void BiasActivate(float* values, const float* bias, int64_t rows, int width,
                  HiddenActivation activation) {
  constexpr float kSqrtHalf = 0.70710678118654752440f;
  constexpr float kSqrtTwoOverPi = 0.79788456080286535588f;
  for (int64_t r = 0; r < rows; ++r) {
    float* v = values + r * width;
    switch (activation) {
      case HiddenActivation::kGeluErf:
        for (int j = 0; j < width; ++j) {
          const float x = v[j] + bias[j];
          v[j] = 0.5f * x * OnePlusErf(x * kSqrtHalf);
        }
        break;
      case HiddenActivation::kGeluTanh:
        // x/2 (1 + tanh(u)) = x sigmoid(2u) = x / (1 + exp(-2u)); exp saturates at exp(88) for
        // very negative x (x / 1.6e38, as good as torch's 0).
        for (int j = 0; j < width; ++j) {
          const float x = v[j] + bias[j];
          const float u = kSqrtTwoOverPi * (x + 0.044715f * x * x * x);
          v[j] = x / (1.0f + Exp(-2.0f * u));
        }
        break;
      case HiddenActivation::kRelu:
        for (int j = 0; j < width; ++j) {
          const float x = v[j] + bias[j];
          v[j] = x > 0.0f ? x : 0.0f;
        }
        break;
      case HiddenActivation::kSilu:
        for (int j = 0; j < width; ++j) {
          const float x = v[j] + bias[j];
          v[j] = x / (1.0f + Exp(-x));
        }
        break;
    }
  }
}

// row[j] = row[j] * scale + mask_add[j], returning the row's max.
float ScaledRowMax(float* row, const float* mask_add, int n, float scale) {
  const Lanes scales = Splat(scale);
  Lanes lanes = Splat(-std::numeric_limits<float>::infinity());
  int j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const Lanes v = LoadLanes(row + j) * scales + LoadLanes(mask_add + j);
    StoreLanes(row + j, v);
    lanes = LaneMax(v, lanes);
  }
  float max = -std::numeric_limits<float>::infinity();
  for (; j < n; ++j) {
    const float v = row[j] * scale + mask_add[j];
    row[j] = v;
    max = v > max ? v : max;
  }
  for (int l = 0; l < kLanes; ++l) max = lanes[l] > max ? lanes[l] : max;
  return max;
}

// row[j] = exp(row[j] - max), returning their sum (in kLanes accumulators, as Sum).
float ExpMinusMax(float* row, float max, int n) {
  float lanes[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma GCC unroll 16
    for (int l = 0; l < kLanes; ++l) {
      const float e = Exp(row[j + l] - max);
      row[j + l] = e;
      lanes[l] += e;
    }
  }
  float sum = 0.0f;
  for (; j < n; ++j) {
    row[j] = Exp(row[j] - max);
    sum += row[j];
  }
  for (float lane : lanes) sum += lane;
  return sum;
}

float Sum(const float* x, int n) {
  float lanes[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma GCC unroll 16
    for (int l = 0; l < kLanes; ++l) lanes[l] += x[j + l];
  }
  float sum = 0.0f;
  for (; j < n; ++j) sum += x[j];
  for (float lane : lanes) sum += lane;
  return sum;
}

float SquaredDeviations(const float* x, float mean, int n) {
  float lanes[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma GCC unroll 16
    for (int l = 0; l < kLanes; ++l) {
      const float d = x[j + l] - mean;
      lanes[l] += d * d;
    }
  }
  float sum = 0.0f;
  for (; j < n; ++j) sum += (x[j] - mean) * (x[j] - mean);
  for (float lane : lanes) sum += lane;
  return sum;
}

// Three passes over a row that stays in L1: scale + mask and the max, exp and the sum, the
// division. Each pass runs over a group of kSoftmaxGroup rows before the next pass starts: a
// row's max and sum end in a chain of kLanes dependent scalar steps (in a fixed order, which keeps
// the bits), and with one row at a time the core waited on those chains at attention's short rows
// (128 keys). Rows side by side let it overlap one row's chain with the next row's vectors: ~2%
// of an INT8 all-MiniLM-L6-v2 forward pass on the Intel VM. Every row's arithmetic is unchanged.
constexpr int kSoftmaxGroup = 4;

void MaskedSoftmax(float* scores, const float* mask_add, int rows, int n, float scale) {
  for (int i = 0; i < rows; i += kSoftmaxGroup) {
    const int group = rows - i < kSoftmaxGroup ? rows - i : kSoftmaxGroup;
    float* first = scores + static_cast<int64_t>(i) * n;
    float max[kSoftmaxGroup];
    float inv[kSoftmaxGroup];
    for (int g = 0; g < group; ++g)
      max[g] = ScaledRowMax(first + int64_t{g} * n, mask_add, n, scale);
    for (int g = 0; g < group; ++g) inv[g] = 1.0f / ExpMinusMax(first + int64_t{g} * n, max[g], n);
    for (int g = 0; g < group; ++g) {
      float* row = first + int64_t{g} * n;
      const Lanes invs = Splat(inv[g]);
      int j = 0;
      for (; j + kLanes <= n; j += kLanes) StoreLanes(row + j, LoadLanes(row + j) * invs);
      for (; j < n; ++j) row[j] *= inv[g];
    }
  }
}

// Mean and variance of a row in two passes over it (the row is in L1 by then): the one-pass
// E[x^2] - E[x]^2 would lose digits when the mean is large against the spread.
void NormalizeRow(float* x, const float* gamma, const float* beta, int width, float eps) {
  const float mean = Sum(x, width) / static_cast<float>(width);
  const float variance = SquaredDeviations(x, mean, width) / static_cast<float>(width);
  const float inv = 1.0f / std::sqrt(variance + eps);
  const Lanes means = Splat(mean);
  const Lanes invs = Splat(inv);
  int j = 0;
  for (; j + kLanes <= width; j += kLanes) {
    StoreLanes(x + j,
               (LoadLanes(x + j) - means) * invs * LoadLanes(gamma + j) + LoadLanes(beta + j));
  }
  for (; j < width; ++j) x[j] = (x[j] - mean) * inv * gamma[j] + beta[j];
}

void BiasResidualLayerNorm(const float* y, const float* bias, const float* gamma, const float* beta,
                           int64_t rows, int width, float eps, float* x) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * width;
    float* xr = x + r * width;
    int j = 0;
    for (; j + kLanes <= width; j += kLanes) {
      StoreLanes(xr + j, LoadLanes(xr + j) + (LoadLanes(yr + j) + LoadLanes(bias + j)));
    }
    for (; j < width; ++j) xr[j] += yr[j] + bias[j];
    NormalizeRow(xr, gamma, beta, width, eps);
  }
}

void LayerNorm(float* x, const float* gamma, const float* beta, int64_t rows, int width,
               float eps) {
  for (int64_t r = 0; r < rows; ++r) NormalizeRow(x + r * width, gamma, beta, width, eps);
}

void ErfArray(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Erf(in[i]);
}

void ExpArray(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Exp(in[i]);
}

}  // namespace

extern const KernelTable kTable;
const KernelTable kTable = {
    .name = SLUICE_ENCODER_KERNEL_NAME,
    .bias_activate = BiasActivate,
    .masked_softmax = MaskedSoftmax,
    .bias_residual_layer_norm = BiasResidualLayerNorm,
    .layer_norm = LayerNorm,
    .erf = ErfArray,
    .exp = ExpArray,
};

}  // namespace sluice::engine::models::encoder::kernels::SLUICE_ENCODER_KERNEL_NS
