#include "engine/models/encoder/encoder_precision.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace sluice::engine::models::encoder {
namespace {

std::string Ratio(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2fx", value);
  return text;
}

}  // namespace

absl::StatusOr<CpuPrecision> ParseCpuPrecision(const ModelConfig& config, bool bf16_supported,
                                               double bf16_speedup) {
  auto it = config.parameters.find(kPrecisionParam);
  if (it == config.parameters.end() || it->second == "fp32") {
    return CpuPrecision{WeightFormat::kFp32, it == config.parameters.end()
                                                 ? "precision fp32 (the default)"
                                                 : "precision fp32 (from its config)"};
  }
  if (it->second == "bf16") {
    if (!bf16_supported) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", kPrecisionParam,
                       "' = 'bf16' needs a CPU with AVX512_BF16 (and AVX-512BW/VL), which this "
                       "one lacks; use fp32, or auto to take bf16 only where the CPU has it"));
    }
    return CpuPrecision{WeightFormat::kBf16,
                        "precision bf16 (from its config: BF16 weights and GEMM inputs, FP32 "
                        "accumulation)"};
  }
  if (it->second == "int8") {
    // Served on every CPU: the portable kernel gives the VNNI one's bits, so an int8 model answers
    // the same everywhere, only slower where the CPU lacks VNNI (the summary says so).
    return CpuPrecision{
        WeightFormat::kInt8,
        gemm::Int8VnniSupported()
            ? "precision int8 (from its config: INT8 weights per output channel, activations per "
              "token, INT32 accumulation; AVX512-VNNI kernel)"
            : "precision int8 (from its config: INT8 weights per output channel, activations per "
              "token, INT32 accumulation; generic kernel, slower than fp32: this CPU lacks "
              "AVX512_VNNI)"};
  }
  if (it->second == "auto") {
    if (!bf16_supported) {
      return CpuPrecision{WeightFormat::kFp32, "precision fp32 (auto: the CPU lacks AVX512_BF16)"};
    }
    if (bf16_speedup >= kAutoBf16MinSpeedup) {
      return CpuPrecision{
          WeightFormat::kBf16,
          absl::StrCat("precision bf16 (auto: the CPU has AVX512_BF16, its BF16 dot product "
                       "peaks at ",
                       Ratio(bf16_speedup),
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
  return ParseCpuPrecision(config, gemm::Bf16Supported(), automatic ? gemm::Bf16Speedup() : 0.0);
}

}  // namespace sluice::engine::models::encoder
