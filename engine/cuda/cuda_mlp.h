#pragma once

// The `mlp` on the GPU (cuda_mlp.cc): what tests and tools may ask of an instance beyond the
// CudaModelInstance interface (cuda_model.h CreateCudaMlpInstance makes one).

#include <string>

namespace sluice::engine::cuda {

class CudaModelInstance;

// How each layer of an mlp instance is computed, e.g. "mlp on cuda:0, FP32 GEMMs; layer 0
// (512x784): cuBLASLt GELU_BIAS (tanh form) epilogue; layer 1 (256x512): plain GEMM + our
// bias/activation kernel; ..." (a fused cuBLASLt epilogue, our kernel by design, or our kernel
// because cuBLASLt had nothing for the fused one, with its reason). Empty when `instance` is not
// an mlp instance. Tests choose their tolerance from it and print it on failure.
std::string DescribeCudaMlpInstance(const CudaModelInstance& instance);

}  // namespace sluice::engine::cuda
