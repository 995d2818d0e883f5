#pragma once

// Executor construction: the one place that decides whether a model version's instances run on
// the CPU backend (engine/cpu) or on a GPU (the backend's GPU half, from the backend registry:
// engine/backend_registry.h), builds and warms them up. The Engine calls it while loading a
// version; it holds no state.

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/log.h"
#include "engine/core/backend.h"
#include "engine/core/executor.h"
#include "engine/core/model_config.h"
#include "engine/device.h"

namespace sluice::engine {

struct ExecutorFactoryOptions {
  // Where models run (SelectDevice).
  DeviceSelection device = {};
  // In-flight batches per instance on the CPU backend and on a GPU.
  int cpu_slots = 2;
  int gpu_slots = 3;
  // A model with one instance on the CPU backend runs its batches on the scheduler's batcher
  // thread (CpuExecutorOptions::run_on_caller). Models with more instances keep the executor
  // threads: the batcher must hand batches to several instances at once.
  bool cpu_single_instance_on_batcher = true;
  // Borrowed, nullable: says when a model falls back to the CPU backend.
  common::Logger* logger = nullptr;
  // The ExecutorOptions of instance `instance` with `slots` slots (the engine's callbacks: slot
  // freed, fault, stats, the test hook). Called once per executor built.
  std::function<ExecutorOptions(int slots, int instance)> executor_options;
};

// One executor per instance of `model` (config.instance_count). On a CUDA device, a model whose
// instance_group kind is not KIND_CPU gets CudaExecutors (on the instance_group's `gpus`, else on
// the selected device) if its backend has a GPU half (BackendRegistration::create_gpu_executor);
// otherwise (or if that answers Unimplemented for this model) every instance is a CpuExecutor over
// model.CreateInstance(i), warmed up on zeros first (batch 1 and max_batch_size; models with
// variable dims or BYTES inputs are not warmed up). `spec` is read during the call; `model` and
// its config are borrowed by the executors and must outlive them.
absl::StatusOr<std::vector<std::unique_ptr<Executor>>> CreateExecutors(
    const ModelSpec& spec, Model& model, const ExecutorFactoryOptions& options);

}  // namespace sluice::engine
