#pragma once

// LoadLimits: the most a model config may ask the engine to allocate or start when it loads. A
// config is input (issue 17 item 3): without these bounds, `dims: [1099511627776]`, a
// max_batch_size of 2^31-1 or an instance_group count of 1500 made the load throw
// std::bad_alloc / std::system_error and took the whole process down. Every bound is checked
// before anything is allocated, and the message names the model, the field and the limit
// (sluice-server sets them from its --max-model-* flags; docs/operations.md).

#include <cstdint>
#include <exception>

#include "absl/status/status.h"
#include "engine/core/model_config.h"

namespace sluice::engine {

struct LoadLimits {
  // Largest max_batch_size a config may declare.
  int max_batch_size = 65536;
  // Largest byte size of one input or output tensor with fixed dims, at max_batch_size rows
  // (what warm-up and the backends' scratch allocate for it). 1 GiB.
  int64_t max_tensor_bytes = int64_t{1} << 30;
  // Largest byte size of one full batch: every fixed-size input and output at max_batch_size.
  // 2 GiB.
  int64_t max_batch_bytes = int64_t{2} << 30;
  // Most model instances (executors) one version may have.
  int max_instances = 64;
  // Most threads one version's load may start: the batcher and kThreadsPerInstance per instance.
  int max_threads = 256;
  // Most bytes one version's load may allocate up front: per instance its warm-up batch and its
  // backend's scratch, plus what the instances share (weights). 4 GiB.
  int64_t max_load_bytes = int64_t{4} << 30;
};

// Threads one instance starts on the CPU backend (its executor and completion threads); the
// GPU executor starts no more.
inline constexpr int kThreadsPerInstance = 2;

// Checks `config` against `limits` without allocating: max_batch_size, each tensor's byte size
// (with 64-bit overflow checks: a dims product that overflows is refused by name), the batch,
// the instance and thread counts, and the load's memory without backend scratch.
// InvalidArgument naming the model, the field and the limit (and the flag that raises it).
absl::Status CheckLoadLimits(const ModelConfig& config, const LoadLimits& limits);

// For backends that size buffers from their files (mlp: scratch for max_batch_size rows of its
// widest layer): checks the whole load, `per_instance_bytes` of scratch per instance plus
// `shared_bytes` (weights), against max_load_bytes. `what` names the allocation in the error.
// Saturating arithmetic: callers may pass products that would overflow as INT64_MAX.
absl::Status CheckLoadBytes(const ModelConfig& config, const LoadLimits& limits,
                            int64_t per_instance_bytes, int64_t shared_bytes,
                            absl::string_view what);

// The load error for an exception that escaped a load (std::bad_alloc, std::system_error from
// std::thread, std::length_error): ResourceExhausted naming the model, version and exception.
absl::Status LoadExceptionStatus(absl::string_view model, int64_t version,
                                 const std::exception& exception);

// a * b, or INT64_MAX if that overflows (both >= 0).
int64_t SaturatingMul(int64_t a, int64_t b);
// a + b, or INT64_MAX if that overflows (both >= 0).
int64_t SaturatingAdd(int64_t a, int64_t b);

}  // namespace sluice::engine
