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
//          and dequantized into FP32 (encoder_gemm_int8.cc); the rest FP32, as bf16. On
//          AVX512-VNNI (VPDPBUSD); refused (a load error) on a CPU without it, as bf16: the
//          portable kernel, the same bits, is ~30x slower than fp32 (kept for tests and for
//          SLUICE_ENCODER_GEMM=generic, which it then runs, saying so in the load summary).
//   auto   the fastest precision this CPU supports whose accuracy check passes, chosen at load
//          and logged with the reason: int8 where the CPU has AVX512_VNNI, VPDPBUSD peaks at
//          >= 1.2x its FP32 FMA rate (gemm::Int8Speedup, measured at the first load; 3.9x on this
//          project's Emerald Rapids VM) and the model's int8 embeddings of a fixed probe batch
//          (ProbeMinCosine) have cosine >= 0.99 to its fp32 ones; else bf16 where the CPU has
//          AVX512_BF16 and its BF16 dot product peaks at >= 1.2x FP32 FMA (gemm::Bf16Speedup;
//          0.5x on Intel without AMX); else fp32. The default stays fp32 everywhere.
//
// The GPU's own parameter is compute_type (encoder_batch.h); `precision` concerns the CPU backend
// (a GPU instance of a bf16 or int8 model uploads PackedWeights::Unpack(): the BF16 values
// widened, the INT8 values times their scales).

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/core/model_config.h"
#include "engine/models/encoder/encoder_gemm.h"
#include "engine/models/encoder/encoder_network.h"

namespace sluice::engine::models::encoder {

inline constexpr char kPrecisionParam[] = "precision";

// The precision a network with these weights serves, as the config names it: "bf16" for kBf16 and
// kFp32HeldBf16 as a network's weight_format (BF16 weights; see ParseCpuPrecision for which
// kernel), "int8" for kInt8, "fp32" otherwise. A network's weight_format is what its load chose
// (auto resolved, fallbacks taken), so this names what serves, for ModelConfig, logs and metrics.
const char* PrecisionName(WeightFormat network_weight_format);

struct CpuPrecision {
  WeightFormat format = WeightFormat::kFp32;
  // For the load log: "precision fp32 (the default)", "precision bf16 (auto: the CPU has
  // AVX512_BF16)"...
  std::string summary;
  // auto's int8: load-time accuracy check first (ProbeMinCosine >= kAutoMinCosine); where it
  // fails the model loads in `fallback`, logged with `fallback_summary` (auto's choice without
  // int8).
  bool check_accuracy = false;
  WeightFormat fallback = WeightFormat::kFp32;
  std::string fallback_summary;
};

// What ParseCpuPrecision knows of the CPU (gemm::Bf16Supported() ...).
struct CpuFeatures {
  bool bf16 = false;
  double bf16_speedup = 0.0;  // gemm::Bf16Speedup()
  bool int8_vnni = false;
  double int8_speedup = 0.0;  // gemm::Int8Speedup()
  // The portable INT8 kernel forced (gemm::Int8For(gemm::Get()) is kGeneric on a VNNI CPU):
  // int8 runs it, auto does not take int8.
  bool int8_generic_forced = false;
};

// auto takes bf16 (int8) from this ratio of BF16 (VPDPBUSD) to FP32 peak rates up.
inline constexpr double kAutoBf16MinSpeedup = 1.2;
inline constexpr double kAutoInt8MinSpeedup = 1.2;
// auto keeps int8 where the probe's embeddings have at least this cosine to fp32's (the issue's
// per-sentence minimum on MiniLM).
inline constexpr double kAutoMinCosine = 0.99;

// The config's `precision`, on a CPU that has (bf16_supported) or lacks AVX512_BF16, whose BF16
// dot product peaks at `bf16_speedup` x its FP32 FMA rate. InvalidArgument naming the parameter
// for an unknown value, and for bf16 where the CPU lacks it.
absl::StatusOr<CpuPrecision> ParseCpuPrecision(const ModelConfig& config, bool bf16_supported,
                                               double bf16_speedup);
// The same with int8's facts too (int8_vnni false above).
absl::StatusOr<CpuPrecision> ParseCpuPrecision(const ModelConfig& config, const CpuFeatures& cpu);

// The same on this CPU (gemm::Bf16Supported(), Int8VnniSupported(), whether the generic kernel
// is forced, and where auto asks Bf16Speedup(), Int8Speedup()). InvalidArgument also for int8
// where the CPU lacks AVX512_VNNI.
absl::StatusOr<CpuPrecision> ParseCpuPrecision(const ModelConfig& config);

// auto's accuracy check: the smallest cosine similarity between `candidate`'s and `reference`'s
// `embedding` of a fixed probe batch (4 sequences of 16 to 128 seeded token ids, within the
// model's vocabulary and length), each network run on the calling thread. REQUIRES the two
// networks read from the same checkpoint.
double ProbeMinCosine(const EncoderNetwork& reference, const EncoderNetwork& candidate);

struct PrecisionLoad {
  std::shared_ptr<const EncoderNetwork> net;
  std::string summary;  // `precision`'s summary, with auto's probe result where it ran
};

// LoadEncoderNetwork(folder, options) in `precision`'s format (options.weight_format ignored).
// Where precision.check_accuracy (auto's int8), the fp32 network is loaded beside it for
// ProbeMinCosine (for a moment both are held) and the int8 one kept only where the probe passes,
// else precision.fallback's. Errors as LoadEncoderNetwork.
absl::StatusOr<PrecisionLoad> LoadEncoderNetworkInPrecision(const std::string& folder,
                                                            EncoderLoadOptions options,
                                                            const CpuPrecision& precision);

}  // namespace sluice::engine::models::encoder
