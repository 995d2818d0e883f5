#pragma once

// The GPU halves of the backends, as the backend registry (engine/backend_registry.cc) names them:
// each builds the CUDA executor of one model instance (engine/core/backend.h, GpuExecutorFactory).
// A new backend with a GPU implementation adds its factory here and names it in its registry
// entry. Thread-safe (no shared state; each call builds its own executor).

#include <memory>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"
#include "engine/core/executor.h"

namespace sluice::engine::cuda {

// Fixed-shape models: one CudaModelInstance (cuda_model.h) run at the config's batch buckets
// (BatchBuckets), one CUDA graph per bucket. Unimplemented for variable dims or BYTES tensors.
absl::StatusOr<std::unique_ptr<Executor>> CreateSimpleGpuExecutor(const GpuExecutorArgs& args);
absl::StatusOr<std::unique_ptr<Executor>> CreateIdentityGpuExecutor(const GpuExecutorArgs& args);
absl::StatusOr<std::unique_ptr<Executor>> CreateMlpGpuExecutor(const GpuExecutorArgs& args);

// The encoder: packed ragged batches, one graph per (sequences, tokens) bucket, its weights taken
// from the loaded CPU model (args.model). Writes the load summary to args.summary.
absl::StatusOr<std::unique_ptr<Executor>> CreateEncoderGpuExecutor(const GpuExecutorArgs& args);

}  // namespace sluice::engine::cuda
