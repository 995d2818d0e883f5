#pragma once

// What the packed GEMM's tests share (encoder_gemm_test.cc, encoder_gemm_held_test.cc,
// encoder_gemm_bf16_test.cc, encoder_gemm_int8_test.cc): the FP32 micro-kernel variants this CPU
// runs, and seeded normal operands.

#include <cstdint>
#include <random>
#include <vector>

#include "engine/models/encoder/encoder_gemm.h"

namespace sluice::engine::models::encoder::test_support {

// generic always; AVX2 + FMA and AVX-512F where the CPU has them.
inline std::vector<const gemm::GemmKernel*> GemmKernels() {
  std::vector<const gemm::GemmKernel*> kernels = {&gemm::Generic()};
  if (gemm::Avx2Fma() != nullptr) kernels.push_back(gemm::Avx2Fma());
  if (gemm::Avx512() != nullptr) kernels.push_back(gemm::Avx512());
  return kernels;
}

// `size` values drawn from N(0, stddev^2).
inline std::vector<float> RandomNormal(int64_t size, std::mt19937& rng, float stddev = 1.0f) {
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(size));
  for (float& value : v) value = normal(rng);
  return v;
}

}  // namespace sluice::engine::models::encoder::test_support
