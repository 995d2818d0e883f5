#pragma once

// Deterministic MLP weights: the bytes of a safetensors file laid out as PyTorch saves
// nn.Sequential(Linear, act, Linear, act, ..., Linear).state_dict(), with values from a fixed PRNG
// so that the same options give the same bytes on every machine. The bundled models/mlp weights
// are made by this (and a test regenerates them and compares the bytes); benchmarks use it to make
// larger models on demand. Pure functions, safe from any thread.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/data_type.h"

namespace sluice::tools {

struct MlpWeightsOptions {
  // Feature counts from input to output: {784, 512, 512, 10} gives three Linear layers,
  // 784->512, 512->512, 512->10. At least two entries, each >= 1.
  std::vector<int64_t> layer_sizes;
  // Seed of the splitmix64 stream all values are drawn from.
  uint64_t seed = 1;
  // Storage type of every tensor: kFp32, kFp16 or kBf16 (values are drawn in FP32 and rounded to
  // nearest even).
  engine::DataType dtype = engine::DataType::kFp32;
  // Whether each layer has a bias (nn.Linear(bias=True), PyTorch's default).
  bool bias = true;
};

// The safetensors file. Layer i (0-based) is stored as "<2i>.weight" [out, in] and "<2i>.bias"
// [out]: the Linear modules sit at the even indices of the Sequential, the activations between
// them have no parameters. Values are uniform in [-1/sqrt(in), 1/sqrt(in)) (the range of PyTorch's
// default nn.Linear initialisation), drawn in file order: layer 0's weight row by row, its bias,
// then layer 1, ... Each value is (2u - 1) / sqrt(in) with u = (splitmix64() >> 11) x 2^-53,
// computed in double and rounded once to FP32 (exact IEEE operations: the same on every machine).
// The header's __metadata__ records the options. InvalidArgument for bad options.
absl::StatusOr<std::string> GenerateMlpWeights(const MlpWeightsOptions& options);

// Parses "784,512,512,10"; "N*R" repeats N R times ("4096*9" is nine 4096s). InvalidArgument
// naming the bad entry.
absl::StatusOr<std::vector<int64_t>> ParseLayerSizes(absl::string_view text);

// The canonical text of `sizes`: "784,512,512,10".
std::string LayerSizesText(const std::vector<int64_t>& sizes);

}  // namespace sluice::tools
