#include "engine/models/dense.h"

#include <cblas.h>  // OpenBLAS's (pkg-config openblas): also declares openblas_set_num_threads

#include <algorithm>
#include <cmath>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"

namespace sluice::engine::cpu {
namespace {

constexpr Activation kActivations[] = {
    Activation::kNone, Activation::kRelu,    Activation::kGelu, Activation::kGeluTanh,
    Activation::kSilu, Activation::kSigmoid, Activation::kTanh, Activation::kSoftmax,
};

// One element. A template per activation so the compiler sees a branch-free inner loop.
template <Activation kind>
inline float Apply(float x) {
  if constexpr (kind == Activation::kRelu) {
    // This exact form is x86's maxss(0, x): branch-free, vectorizable, and NaN stays NaN (as in
    // torch.relu) because a false comparison returns x. A branchy form mispredicts on every
    // other element of a random-signed row and cost more than the GEMM's tail.
    return x < 0.f ? 0.f : x;
  } else if constexpr (kind == Activation::kGelu) {
    return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f));
  } else if constexpr (kind == Activation::kGeluTanh) {
    constexpr float kSqrt2OverPi = 0.79788456080286536f;
    return 0.5f * x * (1.f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
  } else if constexpr (kind == Activation::kSilu) {
    return x / (1.f + std::exp(-x));  // exp overflows to inf for very negative x: x/inf = -0
  } else if constexpr (kind == Activation::kSigmoid) {
    return 1.f / (1.f + std::exp(-x));
  } else if constexpr (kind == Activation::kTanh) {
    return std::tanh(x);
  } else {
    return x;
  }
}

// Bias and activation in one pass over each row, while the row is still in cache from the GEMM.
template <Activation kind>
void EpilogueRows(float* __restrict values, int rows, int columns, const float* __restrict bias) {
  for (int r = 0; r < rows; ++r) {
    float* row = values + static_cast<size_t>(r) * columns;
    if (bias != nullptr) {
      for (int c = 0; c < columns; ++c) row[c] = Apply<kind>(row[c] + bias[c]);
    } else if constexpr (kind != Activation::kNone) {
      for (int c = 0; c < columns; ++c) row[c] = Apply<kind>(row[c]);
    }
  }
}

// Softmax needs the row's maximum (for exp without overflow) and sum, so it walks each row three
// times; the row is small and stays in L1 between the walks.
void SoftmaxRows(float* values, int rows, int columns, const float* bias) {
  for (int r = 0; r < rows; ++r) {
    float* row = values + static_cast<size_t>(r) * columns;
    float max = -INFINITY;
    for (int c = 0; c < columns; ++c) {
      if (bias != nullptr) row[c] += bias[c];
      max = std::max(max, row[c]);
    }
    float sum = 0.f;
    for (int c = 0; c < columns; ++c) {
      row[c] = std::exp(row[c] - max);
      sum += row[c];
    }
    const float scale = 1.f / sum;
    for (int c = 0; c < columns; ++c) row[c] *= scale;
  }
}

}  // namespace

absl::string_view ActivationName(Activation activation) {
  switch (activation) {
    case Activation::kNone:
      return "none";
    case Activation::kRelu:
      return "relu";
    case Activation::kGelu:
      return "gelu";
    case Activation::kGeluTanh:
      return "gelu_tanh";
    case Activation::kSilu:
      return "silu";
    case Activation::kSigmoid:
      return "sigmoid";
    case Activation::kTanh:
      return "tanh";
    case Activation::kSoftmax:
      return "softmax";
  }
  return "unknown";
}

std::vector<std::string> ActivationNames() {
  std::vector<std::string> names;
  for (Activation activation : kActivations) names.emplace_back(ActivationName(activation));
  return names;
}

absl::StatusOr<Activation> ParseActivation(absl::string_view name) {
  for (Activation activation : kActivations) {
    if (ActivationName(activation) == name) return activation;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown activation '", name, "' (known: ", absl::StrJoin(ActivationNames(), ", "), ")"));
}

void BiasActivation(std::span<float> values, int rows, int columns, std::span<const float> bias,
                    Activation activation) {
  DCHECK(values.size() == static_cast<size_t>(rows) * static_cast<size_t>(columns));
  DCHECK(bias.empty() || bias.size() == static_cast<size_t>(columns));
  float* data = values.data();
  const float* b = bias.empty() ? nullptr : bias.data();
  switch (activation) {
    case Activation::kNone:
      return EpilogueRows<Activation::kNone>(data, rows, columns, b);
    case Activation::kRelu:
      return EpilogueRows<Activation::kRelu>(data, rows, columns, b);
    case Activation::kGelu:
      return EpilogueRows<Activation::kGelu>(data, rows, columns, b);
    case Activation::kGeluTanh:
      return EpilogueRows<Activation::kGeluTanh>(data, rows, columns, b);
    case Activation::kSilu:
      return EpilogueRows<Activation::kSilu>(data, rows, columns, b);
    case Activation::kSigmoid:
      return EpilogueRows<Activation::kSigmoid>(data, rows, columns, b);
    case Activation::kTanh:
      return EpilogueRows<Activation::kTanh>(data, rows, columns, b);
    case Activation::kSoftmax:
      return SoftmaxRows(data, rows, columns, b);
  }
}

void Sgemm(const float* a, const float* b, int m, int n, int k, float* c) {
  if (m == 0 || n == 0) return;
  // Row-major C = A x B^T: B is nn.Linear's [out, in] weight, read transposed in place.
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.f, a, k, b, k, 0.f, c, n);
}

void DenseForward(const DenseLayer& layer, const float* input, int rows, float* output) {
  DCHECK(layer.weight.size() ==
         static_cast<size_t>(layer.in_features) * static_cast<size_t>(layer.out_features));
  if (rows == 0) return;
  Sgemm(input, layer.weight.data(), rows, layer.out_features, layer.in_features, output);
  BiasActivation(std::span<float>(output, static_cast<size_t>(rows) * layer.out_features), rows,
                 layer.out_features, layer.bias, layer.activation);
}

void UseSingleThreadedBlas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

}  // namespace sluice::engine::cpu
