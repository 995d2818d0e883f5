#pragma once

// The CPU encoder's `precision` (issue 36), a model config parameter:
//
//   fp32   (the default, and where the parameter is absent) every GEMM in FP32
//   bf16   the encoder layers' four linear layers with BF16 weights (rounded at load, half the
//          bytes) and BF16 activations (rounded per row block), accumulated in FP32
//          (encoder_gemm_bf16.cc); attention's two products, LayerNorm, softmax, GELU, pooling
//          and the heads stay FP32. Refused (a load error) on a CPU without AVX512_BF16: a model
//          asked for by name is not silently served in another precision.
//   int8   the same four linear layers with INT8 weights (symmetric, one scale per output
//          channel, quantized at load: a quarter of the bytes) and 8-bit activations (one scale
//          and zero point per token, quantized per row block at run time), products summed in INT32
//          and dequantized into FP32 (encoder_gemm_int8.cc); the rest FP32, as bf16. Served on
//          every CPU: AVX512-VNNI's VPDPBUSD where the CPU has it, else a portable kernel with the
//          same bits (several times slower than fp32; the load summary says which).
//   auto   bf16 where the CPU has AVX512_BF16 and its BF16 dot product peaks at >= 1.2x its FP32
//          FMA rate (gemm::Bf16Speedup, measured at the first load), else fp32; the choice and
//          the measured ratio in the load log. On Intel CPUs without an AMX kernel (this slice)
//          BF16 measured 0.5x, so auto is fp32 there; the default stays fp32 everywhere.
//
// The GPU's own parameter is compute_type (encoder_batch.h); `precision` concerns the CPU backend
// (a GPU instance of a bf16 model uploads PackedWeights::Unpack(), the BF16 values widened).

#include <string>

#include "absl/status/statusor.h"
#include "engine/core/model_config.h"
#include "engine/models/encoder/encoder_gemm.h"

namespace sluice::engine::models::encoder {

inline constexpr char kPrecisionParam[] = "precision";

struct CpuPrecision {
  WeightFormat format = WeightFormat::kFp32;
  // For the load log: "precision fp32 (the default)", "precision bf16 (auto: the CPU has
  // AVX512_BF16)"...
  std::string summary;
};

// auto takes bf16 from this ratio of BF16 to FP32 peak rates up.
inline constexpr double kAutoBf16MinSpeedup = 1.2;

// The config's `precision`, on a CPU that has (bf16_supported) or lacks AVX512_BF16, whose BF16
// dot product peaks at `bf16_speedup` x its FP32 FMA rate. InvalidArgument naming the parameter
// for an unknown value, and for bf16 where the CPU lacks it.
absl::StatusOr<CpuPrecision> ParseCpuPrecision(const ModelConfig& config, bool bf16_supported,
                                               double bf16_speedup);

// The same on this CPU (gemm::Bf16Supported(), gemm::Bf16Speedup() where auto asks).
absl::StatusOr<CpuPrecision> ParseCpuPrecision(const ModelConfig& config);

}  // namespace sluice::engine::models::encoder
