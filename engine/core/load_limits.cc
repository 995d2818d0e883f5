#include "engine/core/load_limits.h"

#include <algorithm>
#include <limits>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/echo.h"

namespace sluice::engine {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

absl::Status OverLimit(const ModelConfig& config, absl::string_view what, int64_t value,
                       absl::string_view limit_name, int64_t limit, absl::string_view flag) {
  return absl::InvalidArgumentError(absl::StrCat(
      "model '", common::EchoInput(config.name), "': ", what, " ",
      value == kInt64Max ? std::string("overflows 64 bits") : absl::StrCat("is ", value),
      ", over the limit ", limit_name, " = ", limit, " (raise it with ", flag, ")"));
}

// Bytes of one item (no batch dimension) of a tensor with fixed dims; nullopt-like -1 for BYTES
// tensors and dims of -1 (their size is the request's, bounded by the gRPC message limit).
// INT64_MAX when the dims product overflows.
int64_t ItemBytes(const TensorSpec& spec) {
  if (spec.dtype == DataType::kBytes) return -1;
  int64_t elements = 1;
  for (int64_t dim : spec.dims) {
    if (dim < 0) return -1;
    elements = SaturatingMul(elements, dim);
  }
  return SaturatingMul(elements, static_cast<int64_t>(DataTypeByteSize(spec.dtype)));
}

// Bytes of every fixed-size input and output at max_batch_size rows (saturating).
int64_t BatchBytes(const ModelConfig& config) {
  const int64_t rows = config.max_batch_size > 0 ? config.max_batch_size : 1;
  int64_t total = 0;
  for (const auto* specs : {&config.inputs, &config.outputs}) {
    for (const TensorSpec& spec : *specs) {
      const int64_t item = ItemBytes(spec);
      if (item > 0) total = SaturatingAdd(total, SaturatingMul(item, rows));
    }
  }
  return total;
}

}  // namespace

int64_t SaturatingMul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  if (a > kInt64Max / b) return kInt64Max;
  return a * b;
}

int64_t SaturatingAdd(int64_t a, int64_t b) { return a > kInt64Max - b ? kInt64Max : a + b; }

absl::Status CheckLoadLimits(const ModelConfig& config, const LoadLimits& limits) {
  if (config.max_batch_size > limits.max_batch_size) {
    return OverLimit(config, "max_batch_size", config.max_batch_size, "max_batch_size",
                     limits.max_batch_size, "--max-model-batch-size");
  }
  const int64_t rows = config.max_batch_size > 0 ? config.max_batch_size : 1;
  for (const auto* specs : {&config.inputs, &config.outputs}) {
    const char* kind = specs == &config.inputs ? "input" : "output";
    for (const TensorSpec& spec : *specs) {
      const int64_t item = ItemBytes(spec);
      if (item < 0) continue;
      const int64_t bytes = SaturatingMul(item, rows);
      if (bytes > limits.max_tensor_bytes) {
        return OverLimit(
            config,
            absl::StrCat(kind, " '", common::EchoInput(spec.name), "' (", DataTypeName(spec.dtype),
                         " dims ", ShapeToString(spec.dims), ", ", rows, " rows) in bytes"),
            bytes, "max_tensor_bytes", limits.max_tensor_bytes, "--max-tensor-bytes");
      }
    }
  }
  const int64_t batch = BatchBytes(config);
  if (batch > limits.max_batch_bytes) {
    return OverLimit(config,
                     absl::StrCat("one batch of ", rows, " rows (every input and output) in bytes"),
                     batch, "max_batch_bytes", limits.max_batch_bytes, "--max-batch-bytes");
  }
  if (config.instance_count > limits.max_instances) {
    return OverLimit(config, "instance_group count (instances)", config.instance_count,
                     "max_instances", limits.max_instances, "--max-model-instances");
  }
  const int64_t threads =
      SaturatingAdd(1, SaturatingMul(config.instance_count, kThreadsPerInstance));
  if (threads > limits.max_threads) {
    return OverLimit(config,
                     absl::StrCat("threads for ", config.instance_count, " instances (",
                                  kThreadsPerInstance, " each and the batcher)"),
                     threads, "max_threads", limits.max_threads, "--max-model-threads");
  }
  return CheckLoadBytes(config, limits, 0, 0, "warm-up batches");
}

absl::Status LoadExceptionStatus(absl::string_view model, int64_t version,
                                 const std::exception& exception) {
  const bool no_memory = dynamic_cast<const std::bad_alloc*>(&exception) != nullptr;
  return absl::ResourceExhaustedError(
      absl::StrCat("model '", common::EchoInput(model), "' version ", version,
                   " failed to load: ", no_memory ? "out of memory" : "a system resource ran out",
                   " (", common::EchoInput(exception.what()), ")"));
}

absl::Status CheckLoadBytes(const ModelConfig& config, const LoadLimits& limits,
                            int64_t per_instance_bytes, int64_t shared_bytes,
                            absl::string_view what) {
  // Warm-up allocates one full batch per instance (inputs, then the outputs it returns), on top
  // of whatever the backend keeps.
  const int64_t per_instance = SaturatingAdd(BatchBytes(config), per_instance_bytes);
  const int64_t total =
      SaturatingAdd(SaturatingMul(per_instance, std::max(config.instance_count, 1)), shared_bytes);
  if (total > limits.max_load_bytes) {
    return OverLimit(config,
                     absl::StrCat("memory of the load (", what, ", ", config.instance_count,
                                  " instances) in bytes"),
                     total, "max_load_bytes", limits.max_load_bytes, "--max-model-load-bytes");
  }
  return absl::OkStatus();
}

}  // namespace sluice::engine
