#pragma once

// The CPU encoder's `precision` (issue 36), a model config parameter:
//
//   fp32   (the default, and where the parameter is absent) every GEMM in FP32
//   bf16   the encoder layers' four linear layers with BF16 weights (rounded at load, half the
//          bytes), accumulated in FP32; attention's two products, LayerNorm, softmax, GELU,
//          pooling and the heads stay FP32. Two arithmetics, chosen at load by the CPU
//          (Bf16Arithmetic): BF16 dot products (AVX512_BF16's VDPBF16PS on BF16 activations,
//          rounded per row block: encoder_gemm_bf16.cc) where they peak at >= kBf16DotMinSpeedup
//          x the CPU's FP32 FMA rate (gemm::Bf16Speedup); elsewhere the FP32 GEMM on the BF16
//          weights widened per panel (kFp32HeldBf16, as a BF16 checkpoint is held; FP32
//          activations), which keeps FP32's speed where VDPBF16PS would halve it (Intel
//          without AMX: 0.5x) and runs on every CPU. Either way the weights are BF16 and the
//          load log names the arithmetic and why. The word embeddings are held in BF16 too
//          (EmbeddingTable::InPrecision), for int8 as well.
//   int8   the same four linear layers with INT8 weights (symmetric, one scale per output
//          channel, quantized at load: a quarter of the bytes) and 8-bit activations (one scale
//          and zero point per token, quantized per row block at run time), products summed in INT32
//          and dequantized into FP32 (encoder_gemm_int8.cc); the rest FP32, as bf16. On
//          AVX512-VNNI (VPDPBUSD); refused (a load error) on a CPU without it: the portable kernel,
//          the same bits, is ~30x slower than fp32 (kept for tests and for
//          SLUICE_ENCODER_GEMM=generic, which it then runs, saying so in the load summary).
//   auto   the fastest precision this CPU supports whose accuracy check passes, chosen at load
//          and logged with the reason: int8 where the CPU has AVX512_VNNI, VPDPBUSD peaks at
//          >= 1.2x its FP32 FMA rate (gemm::Int8Speedup, measured at the first load; 3.9x on this
//          project's Emerald Rapids VM) and the model's int8 embeddings of a fixed probe batch
//          (ProbeMinCosine) have cosine >= 0.99 to its fp32 ones; else bf16 (dot products) where
//          the CPU has AVX512_BF16 and its BF16 dot product peaks at >= 1.2x FP32 FMA
//          (gemm::Bf16Speedup; 0.5x on Intel without AMX); else fp32 (bf16 on widened weights
//          saves memory, not time, so auto does not take it). The default stays fp32.
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

// How `precision: bf16` computes. kChoose (the default): kDot where the CPU has AVX512_BF16 and
// its BF16 dot product peaks at >= kBf16DotMinSpeedup x its FP32 FMA, else kWiden.
// SLUICE_ENCODER_BF16=dot|widen forces one (benchmarks' A/B, tests); dot where the CPU lacks
// AVX512_BF16 is a load error.
enum class Bf16Arithmetic : int { kChoose, kDot, kWiden };
inline constexpr char kBf16ArithmeticEnv[] = "SLUICE_ENCODER_BF16";

// What ParseCpuPrecision knows of the CPU (gemm::Bf16Supported() ...).
struct CpuFeatures {
  bool bf16 = false;
  double bf16_speedup = 0.0;  // gemm::Bf16Speedup()
  Bf16Arithmetic bf16_arithmetic = Bf16Arithmetic::kChoose;
  bool int8_vnni = false;
  double int8_speedup = 0.0;  // gemm::Int8Speedup()
  // The portable INT8 kernel forced (gemm::Int8For(gemm::Get()) is kGeneric on a VNNI CPU):
  // int8 runs it, auto does not take int8.
  bool int8_generic_forced = false;
  // AMX runs the BF16 (INT8) products (gemm::AmxBf16Enabled(), AmxInt8Enabled()): the speedups
  // above are then the tile instructions' (TDPBF16PS, TDPBUSD), and the load log says AMX.
  bool amx_bf16 = false;
  bool amx_int8 = false;
};

// auto takes bf16 (int8) from this ratio of BF16 (VPDPBUSD) to FP32 peak rates up; bf16 computes
// with BF16 dot products from the same ratio up (below it, rounding the activations too would buy
// little or no time for their accuracy).
inline constexpr double kAutoBf16MinSpeedup = 1.2;
inline constexpr double kBf16DotMinSpeedup = kAutoBf16MinSpeedup;
inline constexpr double kAutoInt8MinSpeedup = 1.2;
// auto keeps int8 where the probe's embeddings have at least this cosine to fp32's (the issue's
// per-sentence minimum on MiniLM).
inline constexpr double kAutoMinCosine = 0.99;

// The config's `precision`, on a CPU that has (bf16_supported) or lacks AVX512_BF16, whose BF16
// dot product peaks at `bf16_speedup` x its FP32 FMA rate. InvalidArgument naming the parameter
// for an unknown value.
absl::StatusOr<CpuPrecision> ParseCpuPrecision(const ModelConfig& config, bool bf16_supported,
                                               double bf16_speedup);
// The same with int8's facts too (int8_vnni false above).
absl::StatusOr<CpuPrecision> ParseCpuPrecision(const ModelConfig& config, const CpuFeatures& cpu);

// The same on this CPU (gemm::Bf16Supported(), Int8VnniSupported(), whether the generic kernel
// is forced, SLUICE_ENCODER_BF16, and where bf16 or auto asks Bf16Speedup(), Int8Speedup()).
// InvalidArgument also for int8 where the CPU lacks AVX512_VNNI, for an unknown
// SLUICE_ENCODER_BF16 value, and for SLUICE_ENCODER_BF16=dot where the CPU lacks AVX512_BF16.
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
