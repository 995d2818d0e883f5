#pragma once

// Executor construction: the one place that decides whether a model version's instances run on
// the CPU backend (engine/cpu) or on a GPU (engine/cuda), builds and warms them up. A new backend's
// executor is chosen here. The Engine calls it while loading a version; it holds no state.

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/log.h"
#include "engine/backend.h"
#include "engine/device.h"
#include "engine/executor.h"
#include "engine/model_config.h"

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
// the selected device) if it has a GPU implementation; otherwise (or if it has none:
// Unimplemented from CreateCudaExecutor) every instance is a CpuExecutor over
// model.CreateInstance(i), warmed up on zeros first (batch 1 and max_batch_size; models with
// variable dims or BYTES inputs are not warmed up). `spec` is read during the call; `model` and
// its config are borrowed by the executors and must outlive them.
absl::StatusOr<std::vector<std::unique_ptr<Executor>>> CreateExecutors(
    const ModelSpec& spec, Model& model, const ExecutorFactoryOptions& options);

// Creates the CUDA executor for one instance of the model `spec` describes, on GPU `device`: the
// model's GPU implementation (weights read from spec.version_path; a ragged model's, such as the
// encoder's, from the loaded `model`), warmed up, every batch bucket's CUDA graph captured
// (unless config.cuda_graphs is false) and run once. `config` (the loaded model's own) and `model`
// are borrowed and must outlive the executor; `spec` is read during the call.
// Unimplemented when this build has no CUDA backend or the model has no GPU implementation
// (variable dims, BYTES tensors, a backend without one): the caller runs it on the CPU instead.
// Other errors fail the load (INTERNAL naming the CUDA call, RESOURCE_EXHAUSTED for device OOM).
// `summary`, when given, receives a ragged model's one-line load summary (precision, buckets,
// fused epilogues, device memory) for the log.
absl::StatusOr<std::unique_ptr<Executor>> CreateCudaExecutor(const ModelSpec& spec,
                                                             const Model& model,
                                                             const ModelConfig& config, int device,
                                                             ExecutorOptions options,
                                                             std::string* summary = nullptr);

}  // namespace sluice::engine
