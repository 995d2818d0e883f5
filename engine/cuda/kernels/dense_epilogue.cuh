#pragma once

// The parts of a dense layer that cuBLASLt's epilogues do not cover: widening FP32 activations to
// FP16/BF16 for tensor-core GEMMs, bias + activation for the activations cuBLASLt has no epilogue
// for (exact GELU, SiLU, sigmoid, tanh), and softmax over each output row. Host-includable.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace sluice::engine::cuda {

// Element types of a layer's activations on the device.
enum class ElementType { kFp32, kFp16, kBf16 };

// Mirrors cpu::Activation (engine/models/dense.h), which nvcc (C++17) cannot include.
enum class DeviceActivation { kNone, kRelu, kGelu, kGeluTanh, kSilu, kSigmoid, kTanh };

// out[i] = (type)in[i] for `count` elements. INTERNAL if the launch fails.
absl::Status LaunchConvertFromFloat(const float* in, void* out, ElementType type, int64_t count,
                                    cudaStream_t stream);

// values[r][c] = activation(values[r][c] + bias[c]) in place over a row-major rows x columns
// matrix of `type`; `bias` (same type, `columns` long) may be null. Math in FP32.
absl::Status LaunchBiasActivation(void* values, const void* bias, ElementType type, int rows,
                                  int columns, DeviceActivation activation, cudaStream_t stream);

// Softmax over each row of a row-major rows x columns FP32 matrix, in place (max-subtracted, as
// the CPU backend computes it).
absl::Status LaunchSoftmaxRows(float* values, int rows, int columns, cudaStream_t stream);

}  // namespace sluice::engine::cuda
