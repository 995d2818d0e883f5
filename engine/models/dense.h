#pragma once

// Dense (fully connected) layers on the CPU: the GEMM on OpenBLAS (cblas_sgemm), then one fused
// pass over each output row that adds the bias and applies the activation. FP32 throughout.
// The functions here are pure (no state but OpenBLAS's process-wide thread setting) and safe to
// call from several threads at once on different outputs.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice::engine::cpu {

// Element-wise activations, plus softmax, which works on a whole row.
enum class Activation {
  kNone,
  kRelu,
  // x * Phi(x) with the exact normal CDF (erf): PyTorch's nn.GELU() default.
  kGelu,
  // The tanh approximation: PyTorch's nn.GELU(approximate="tanh").
  kGeluTanh,
  kSilu,
  kSigmoid,
  kTanh,
  // exp(x_i - max) / sum_j exp(x_j - max) over each row.
  kSoftmax,
};

// "none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "softmax".
absl::string_view ActivationName(Activation activation);
// The inverse of ActivationName (case-sensitive). InvalidArgument listing the known names.
absl::StatusOr<Activation> ParseActivation(absl::string_view name);
// Every activation name, in enum order (for messages and docs).
std::vector<std::string> ActivationNames();

// One fully connected layer as PyTorch's nn.Linear stores it: y = act(x W^T + b).
struct DenseLayer {
  // For messages: the layer's prefix in the weights file ("0", "2", ...).
  std::string name;
  int in_features = 0;
  int out_features = 0;
  // [out_features, in_features], row-major (nn.Linear's own layout; the GEMM reads it transposed).
  std::vector<float> weight;
  // [out_features], or empty for a layer without bias.
  std::vector<float> bias;
  Activation activation = Activation::kNone;
};

// output[rows][out_features] = activation(input[rows][in_features] x weight^T + bias).
// REQUIRES: `input` holds rows x in_features floats and `output` rows x out_features floats; they
// do not overlap; the layer's sizes are consistent (weight and bias sizes match the features).
void DenseForward(const DenseLayer& layer, const float* input, int rows, float* output);

// The epilogue alone: adds `bias` (may be empty) to each of the `rows` rows of `values` (each
// `bias.size()` or, without bias, values.size() / rows wide) and applies `activation`, in one pass
// over each row. REQUIRES: values.size() == rows x columns.
void BiasActivation(std::span<float> values, int rows, int columns, std::span<const float> bias,
                    Activation activation);

// Makes OpenBLAS run every call on the calling thread only. Process-wide and idempotent (the first
// call sets it). Parallelism comes from model instances (one executor thread each), so BLAS's own
// thread pool would only oversubscribe the cores the executors already use.
void UseSingleThreadedBlas();

// Sustained single-thread SGEMM: C[m][n] = A[m][k] x B[n][k]^T, the shape DenseForward runs, on
// the same library. For benchmarks that compare a model's speed with the GEMM it is made of.
// REQUIRES: a holds m x k, b n x k and c m x n floats.
void Sgemm(const float* a, const float* b, int m, int n, int k, float* c);

}  // namespace sluice::engine::cpu
