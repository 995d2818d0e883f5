#include "engine/models/encoder/encoder_precision.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "engine/models/encoder/encoder_forward.h"
#include "engine/models/encoder/encoder_gemm_amx.h"

namespace sluice::engine::models::encoder {
namespace {

std::string Ratio(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2fx", value);
  return text;
}

}  // namespace

const char* PrecisionName(WeightFormat network_weight_format) {
  switch (network_weight_format) {
    case WeightFormat::kBf16:
    case WeightFormat::kFp32HeldBf16:
      return "bf16";
    case WeightFormat::kInt8:
      return "int8";
    case WeightFormat::kFp32:
    case WeightFormat::kFp32HeldFp16:
      break;
  }
  return "fp32";
}

absl::StatusOr<CpuPrecision> ParseCpuPrecision(const ModelConfig& config, bool bf16_supported,
                                               double bf16_speedup) {
  return ParseCpuPrecision(config,
                           CpuFeatures{.bf16 = bf16_supported, .bf16_speedup = bf16_speedup});
}

absl::StatusOr<CpuPrecision> ParseCpuPrecision(const ModelConfig& config, const CpuFeatures& cpu) {
  const bool bf16_supported = cpu.bf16;
  const double bf16_speedup = cpu.bf16_speedup;
  auto it = config.parameters.find(kPrecisionParam);
  if (it == config.parameters.end() || it->second == "fp32") {
    return CpuPrecision{WeightFormat::kFp32, it == config.parameters.end()
                                                 ? "precision fp32 (the default)"
                                                 : "precision fp32 (from its config)"};
  }
  if (it->second == "bf16") {
    const bool dot = cpu.bf16_arithmetic == Bf16Arithmetic::kDot ||
                     (cpu.bf16_arithmetic == Bf16Arithmetic::kChoose && bf16_supported &&
                      bf16_speedup >= kBf16DotMinSpeedup);
    if (dot && !bf16_supported) {
      return absl::InvalidArgumentError(absl::StrCat(
          kBf16ArithmeticEnv,
          "=dot needs a CPU with AVX512_BF16 (and AVX-512BW/VL), which this one lacks; unset it "
          "to serve 'precision' = 'bf16' on BF16 weights widened into FP32 GEMMs"));
    }
    if (dot) {
      return CpuPrecision{
          WeightFormat::kBf16,
          absl::StrCat(
              "precision bf16 (from its config: BF16 weights and GEMM inputs, FP32 "
              "accumulation, on ",
              cpu.amx_bf16 ? "AMX tiles (TDPBF16PS)" : "AVX512-BF16 dot products",
              cpu.bf16_arithmetic == Bf16Arithmetic::kDot
                  ? absl::StrCat(", forced by ", kBf16ArithmeticEnv)
                  : absl::StrCat(", which peak at ", Ratio(bf16_speedup), " its FP32 FMA rate"),
              ")")};
    }
    std::string why =
        cpu.bf16_arithmetic == Bf16Arithmetic::kWiden
            ? absl::StrCat("forced by ", kBf16ArithmeticEnv)
        : !bf16_supported
            ? std::string("the CPU lacks AVX512_BF16")
            : absl::StrCat("the CPU's BF16 dot product peaks at ", Ratio(bf16_speedup),
                           " its FP32 FMA rate, under ", Ratio(kBf16DotMinSpeedup));
    return CpuPrecision{WeightFormat::kFp32HeldBf16,
                        absl::StrCat("precision bf16 (from its config: BF16 weights, widened per "
                                     "panel into FP32 GEMMs, FP32 activations and accumulation: ",
                                     why, ")")};
  }
  if (it->second == "int8") {
    // Refused without VNNI: the portable kernel (the same bits) ran
    // all-MiniLM-L6-v2 at 1.2 sequences/s against fp32's ~40 on the Emerald Rapids VM, a trap
    // rather than a fallback. It stays for tests and SLUICE_ENCODER_GEMM=generic.
    if (!cpu.int8_vnni) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", kPrecisionParam,
          "' = 'int8' needs a CPU with AVX512_VNNI (and AVX-512BW/VL), which this one lacks (the "
          "portable INT8 kernel is ~30x slower than fp32); use fp32, or auto to take int8 only "
          "where the CPU has it"));
    }
    return CpuPrecision{
        WeightFormat::kInt8,
        absl::StrCat("precision int8 (from its config: INT8 weights per output channel, "
                     "activations per token, INT32 accumulation; ",
                     cpu.int8_generic_forced ? "generic kernel, forced by SLUICE_ENCODER_GEMM / "
                                               "SLUICE_ENCODER_KERNELS: ~30x slower than fp32)"
                     : cpu.amx_int8          ? "AMX kernel (TDPBUSD))"
                                             : "AVX512-VNNI kernel)")};
  }
  if (it->second == "auto") {
    if (cpu.int8_vnni && !cpu.int8_generic_forced && cpu.int8_speedup >= kAutoInt8MinSpeedup) {
      CpuFeatures no_int8 = cpu;
      no_int8.int8_vnni = false;
      no_int8.int8_speedup = 0.0;
      ASSIGN_OR_RETURN(const CpuPrecision fallback, ParseCpuPrecision(config, no_int8));
      CpuPrecision chosen{
          WeightFormat::kInt8,
          absl::StrCat("precision int8 (auto: the CPU has ",
                       cpu.amx_int8 ? "AMX-INT8, its TDPBUSD" : "AVX512_VNNI, its VPDPBUSD",
                       " peaks at ", Ratio(cpu.int8_speedup),
                       " its FP32 FMA rate; INT8 weights per output channel, activations per "
                       "token, INT32 accumulation)")};
      chosen.check_accuracy = true;
      chosen.fallback = fallback.format;
      chosen.fallback_summary = fallback.summary;
      return chosen;
    }
    if (!bf16_supported) {
      return CpuPrecision{WeightFormat::kFp32, "precision fp32 (auto: the CPU lacks AVX512_BF16)"};
    }
    if (bf16_speedup >= kAutoBf16MinSpeedup) {
      return CpuPrecision{
          WeightFormat::kBf16,
          absl::StrCat(
              "precision bf16 (auto: the CPU has ",
              cpu.amx_bf16 ? "AMX-BF16, its TDPBF16PS" : "AVX512_BF16, its BF16 dot product",
              " peaks at ", Ratio(bf16_speedup),
              " its FP32 FMA rate; BF16 weights and GEMM inputs, FP32 accumulation)")};
    }
    return CpuPrecision{
        WeightFormat::kFp32,
        absl::StrCat("precision fp32 (auto: the CPU has AVX512_BF16, but its BF16 dot product "
                     "peaks at ",
                     Ratio(bf16_speedup), " its FP32 FMA rate, under ", Ratio(kAutoBf16MinSpeedup),
                     ")")};
  }
  return absl::InvalidArgumentError(absl::StrCat("parameter '", kPrecisionParam, "' = '",
                                                 it->second,
                                                 "' must be one of fp32, bf16, int8, auto"));
}

absl::StatusOr<CpuPrecision> ParseCpuPrecision(const ModelConfig& config) {
  auto it = config.parameters.find(kPrecisionParam);
  const bool automatic = it != config.parameters.end() && it->second == "auto";
  const bool bf16 = it != config.parameters.end() && it->second == "bf16";
  Bf16Arithmetic arithmetic = Bf16Arithmetic::kChoose;
  if (const char* forced = std::getenv(kBf16ArithmeticEnv); bf16 && forced != nullptr) {
    const absl::string_view value(forced);
    if (value == "dot") {
      arithmetic = Bf16Arithmetic::kDot;
    } else if (value == "widen") {
      arithmetic = Bf16Arithmetic::kWiden;
    } else if (!value.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kBf16ArithmeticEnv, "='", value, "' must be dot or widen (or unset)"));
    }
  }
  const bool measure_bf16 = automatic || (bf16 && arithmetic == Bf16Arithmetic::kChoose);
  return ParseCpuPrecision(
      config,
      CpuFeatures{.bf16 = gemm::Bf16Supported(),
                  .bf16_speedup = measure_bf16 ? gemm::Bf16Speedup() : 0.0,
                  .bf16_arithmetic = arithmetic,
                  .int8_vnni = gemm::Int8VnniSupported(),
                  .int8_speedup = automatic ? gemm::Int8Speedup() : 0.0,
                  .int8_generic_forced = gemm::Int8For(gemm::Get()) == gemm::Int8Kernel::kGeneric,
                  .amx_bf16 = gemm::AmxBf16Enabled(),
                  .amx_int8 = gemm::AmxInt8Enabled()});
}

double ProbeMinCosine(const EncoderNetwork& reference, const EncoderNetwork& candidate) {
  // Seeded ids in [1, vocab) minus the padding id, positions as PackRequest gives them.
  PackedBatch batch;
  uint32_t state = 36;
  for (int length : {16, 40, 77, 128}) {
    length = std::min(length, reference.max_sequence_length);
    for (int c = 0; c < length; ++c) {
      state = state * 1664525u + 1013904223u;
      int32_t id = 1 + static_cast<int32_t>((state >> 8) % static_cast<uint32_t>(std::max(
                                                               1, reference.vocab_size - 1)));
      if (id == reference.pad_token_id) id = id + 1 < reference.vocab_size ? id + 1 : 1;
      batch.token_ids.push_back(id);
      batch.token_types.push_back(0);
      batch.attend.push_back(1);
      batch.positions.push_back(reference.positions_after_pad()
                                    ? static_cast<int32_t>(reference.pad_token_id + 1 + c)
                                    : static_cast<int32_t>(c));
    }
    batch.offsets.push_back(batch.tokens());
  }
  const int dim = reference.embedding_size();
  auto embed = [&](const EncoderNetwork& net) {
    EncoderWorkspace workspace;
    Forward(net, batch, workspace, ForwardChunkTokens(), nullptr);
    std::vector<float> out(static_cast<size_t>(batch.sequences()) * dim);
    for (int s = 0; s < batch.sequences(); ++s) {
      PoolEmbedding(net, batch, workspace.hidden(), s, out.data() + int64_t{s} * dim);
    }
    return out;
  };
  const std::vector<float> a = embed(reference);
  const std::vector<float> b = embed(candidate);
  double worst = 1.0;
  for (int s = 0; s < batch.sequences(); ++s) {
    double dot = 0, na = 0, nb = 0;
    for (int i = 0; i < dim; ++i) {
      const double x = a[static_cast<size_t>(s) * dim + i], y = b[static_cast<size_t>(s) * dim + i];
      dot += x * y;
      na += x * x;
      nb += y * y;
    }
    worst = std::min(worst, na > 0 && nb > 0 ? dot / std::sqrt(na * nb) : 0.0);
  }
  return worst;
}

absl::StatusOr<PrecisionLoad> LoadEncoderNetworkInPrecision(const std::string& folder,
                                                            EncoderLoadOptions options,
                                                            const CpuPrecision& precision) {
  options.weight_format = precision.format;
  ASSIGN_OR_RETURN(std::shared_ptr<const EncoderNetwork> net, LoadEncoderNetwork(folder, options));
  if (!precision.check_accuracy) return PrecisionLoad{std::move(net), precision.summary};
  options.weight_format = WeightFormat::kFp32;
  ASSIGN_OR_RETURN(std::shared_ptr<const EncoderNetwork> reference,
                   LoadEncoderNetwork(folder, options));
  const double cosine = ProbeMinCosine(*reference, *net);
  char measured[64];
  std::snprintf(measured, sizeof measured, "probe embeddings' cosine to fp32 min %.5f", cosine);
  if (cosine >= kAutoMinCosine) {
    reference.reset();
#if defined(__GLIBC__)
    // As LoadEncoderNetwork: hand the fp32 reference's freed pages back (glibc keeps them in its
    // heap otherwise: the BERT-base shape stayed at the fp32 load's resident size).
    malloc_trim(0);
#endif
    return PrecisionLoad{std::move(net), absl::StrCat(precision.summary, "; ", measured)};
  }
  std::string summary = absl::StrCat(precision.fallback_summary, "; int8 not taken: ", measured,
                                     " < ", kAutoMinCosine);
  if (precision.fallback == WeightFormat::kFp32)
    return PrecisionLoad{std::move(reference), summary};
  net.reset();
  reference.reset();
  options.weight_format = precision.fallback;
  ASSIGN_OR_RETURN(net, LoadEncoderNetwork(folder, options));
  return PrecisionLoad{std::move(net), std::move(summary)};
}

}  // namespace sluice::engine::models::encoder
