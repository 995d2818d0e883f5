#pragma once

// CudaModelInstance: one copy of a model on one GPU, as the CUDA executor drives it. It owns its
// weights and scratch on the device; the executor owns the slots' input and output buffers and
// hands them in per batch. Implementations: `simple`, `identity` (fixed dims) and `mlp`
// (cuda_models.cc, cuda_mlp.cc).
//
// Thread-safety: Enqueue() is called by one thread at a time (the executor's issuing thread, or
// the loader during warm-up and graph capture), always on the same compute stream: the stream
// orders the batches, so scratch is shared by all slots.

#include <cuda_runtime_api.h>

#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"

namespace sluice::engine::cuda {

class CudaModelInstance {
 public:
  virtual ~CudaModelInstance() = default;

  // Enqueues the model's kernels for `rows` rows (one of the buckets given at creation) on
  // `stream`. inputs[i] holds rows x (item bytes of config input i), contiguous, on the device;
  // outputs[o] receives rows x (item bytes of config output o). Only enqueues: no host
  // synchronization and no allocation, so it can be captured into a CUDA graph. INTERNAL (naming
  // the CUDA or cuBLASLt call) if an enqueue fails.
  virtual absl::Status Enqueue(cudaStream_t stream, std::span<const void* const> inputs,
                               std::span<void* const> outputs, int rows) = 0;

  // Whether output 0 is FP32: the counter kernel then counts its non-finite values.
  virtual bool counts_non_finite() const = 0;
};

// Creates the instance of `spec` on `device`, ready to Enqueue any row count in `buckets`.
// Unimplemented when the backend or the config has no GPU implementation (variable dims, BYTES
// tensors): the engine then runs that model on the CPU backend. Other errors as the CPU backend's
// CreateModel, or INTERNAL / RESOURCE_EXHAUSTED for a CUDA failure.
absl::StatusOr<std::unique_ptr<CudaModelInstance>> CreateCudaModelInstance(
    const ModelSpec& spec, int device, std::span<const int> buckets);

// Bytes of one item (one row) of `tensor`: its fixed dims times its element size. Unimplemented
// for variable dims or BYTES, which the CUDA backend does not run.
absl::StatusOr<size_t> FixedItemBytes(const TensorSpec& tensor);

}  // namespace sluice::engine::cuda
