#pragma once

// The encoder's GEMMs alone on the GPU (sluice-cuda-encoder-bench, issue 35): each of a BERT
// layer's four linear layers as one cuBLASLt GEMM, the encoder's own layout and descriptor (A =
// W^T transposed, no epilogue), the algorithm cuBLASLt's heuristic picks, timed with CUDA events
// over back-to-back repetitions on random data. What the GEMMs reach on their own, to set the
// whole forward pass's TFLOP/s against.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/cuda/kernels/dense_epilogue.cuh"

namespace sluice::bench {

struct GemmTiming {
  std::string name;  // qkv, attention_output, intermediate, output
  int64_t tokens = 0;
  int in = 0;
  int out = 0;
  double us = 0;      // per GEMM, the mean of the repetitions
  double tflops = 0;  // 2 * tokens * in * out / time
};

// Times the four GEMMs of a layer of width `hidden` and `intermediate` at each token count, in
// `type` (FP32 on TF32 tensor cores when `tf32`), `repetitions` each after three warm-ups.
// Errors: the CUDA or cuBLASLt call that failed.
absl::StatusOr<std::vector<GemmTiming>> TimeEncoderGemms(int device, engine::cuda::ElementType type,
                                                         bool tf32, int hidden, int intermediate,
                                                         const std::vector<int64_t>& tokens,
                                                         int repetitions);

}  // namespace sluice::bench
