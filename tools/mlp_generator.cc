#include "tools/mlp_generator.h"

#include <cmath>
#include <cstring>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/wire/float16.h"
#include "engine/core/tensor.h"
#include "engine/models/safetensors.h"

namespace sluice::tools {
namespace {

using engine::DataType;

// splitmix64 (Steele, Lea, Flood 2014): tiny, fast, and its output is fully specified.
uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// `count` values uniform in [-bound, bound), stored as `dtype`, little-endian.
std::vector<std::byte> DrawTensor(uint64_t& state, size_t count, double bound, DataType dtype) {
  const size_t element_size = engine::DataTypeByteSize(dtype);
  std::vector<std::byte> bytes(count * element_size);
  for (size_t i = 0; i < count; ++i) {
    const double u = static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53;  // [0, 1), exact
    const float value = static_cast<float>((2.0 * u - 1.0) * bound);
    std::byte* out = bytes.data() + i * element_size;
    if (dtype == DataType::kFp32) {
      std::memcpy(out, &value, 4);
    } else {
      const uint16_t bits =
          dtype == DataType::kFp16 ? wire::FloatToHalf(value) : wire::FloatToBFloat16(value);
      std::memcpy(out, &bits, 2);
    }
  }
  return bytes;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ParseLayerSizes(absl::string_view text) {
  std::vector<int64_t> sizes;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(entry, '*');
    int64_t size = 0;
    int64_t repeat = 1;
    if (parts.size() > 2 || !absl::SimpleAtoi(parts[0], &size) || size < 1 ||
        (parts.size() == 2 &&
         (!absl::SimpleAtoi(parts[1], &repeat) || repeat < 1 || repeat > 1000))) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer size '", entry, "' in '", text,
                       "' is not a positive integer N or N*R (R in [1, 1000])"));
    }
    sizes.insert(sizes.end(), static_cast<size_t>(repeat), size);
  }
  if (sizes.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer sizes '", text, "' need at least an input and an output size, e.g. 784,512,10"));
  }
  return sizes;
}

std::string LayerSizesText(const std::vector<int64_t>& sizes) { return absl::StrJoin(sizes, ","); }

absl::StatusOr<std::string> GenerateMlpWeights(const MlpWeightsOptions& options) {
  const std::vector<int64_t>& sizes = options.layer_sizes;
  if (sizes.size() < 2) {
    return absl::InvalidArgumentError("an MLP needs at least an input and an output size");
  }
  for (int64_t size : sizes) {
    // Far beyond any sensible layer, and keeps in x out well inside size_t and int (BLAS).
    if (size < 1 || size > (1 << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer size ", size, " is outside [1, ", 1 << 20, "]"));
    }
  }
  if (options.dtype != DataType::kFp32 && options.dtype != DataType::kFp16 &&
      options.dtype != DataType::kBf16) {
    return absl::InvalidArgumentError(absl::StrCat("weights dtype must be FP32, FP16 or BF16, not ",
                                                   engine::DataTypeName(options.dtype)));
  }

  uint64_t state = options.seed;
  // The tensors' bytes must outlive the views handed to the serializer.
  std::vector<std::vector<std::byte>> storage;
  std::vector<engine::TensorView> tensors;
  storage.reserve(2 * (sizes.size() - 1));
  for (size_t layer = 0; layer + 1 < sizes.size(); ++layer) {
    const int64_t in = sizes[layer];
    const int64_t out = sizes[layer + 1];
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    const std::string prefix = absl::StrCat(2 * layer);
    storage.push_back(DrawTensor(state, static_cast<size_t>(out * in), bound, options.dtype));
    tensors.push_back({prefix + ".weight", options.dtype, {out, in}, storage.back()});
    if (options.bias) {
      storage.push_back(DrawTensor(state, static_cast<size_t>(out), bound, options.dtype));
      tensors.push_back({prefix + ".bias", options.dtype, {out}, storage.back()});
    }
  }
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},  // what safetensors.torch.save_file writes
      {"generator", "sluice-make-mlp"},
      {"layers", LayerSizesText(sizes)},
      {"seed", absl::StrCat(options.seed)},
      {"init", "uniform(-1/sqrt(in), 1/sqrt(in)), splitmix64"},
  };
  return engine::models::SerializeSafetensors(tensors, metadata);
}

}  // namespace sluice::tools
