#pragma once

// Device selection for --device=auto|cpu|cuda:N, decided once at start-up. The one place that
// knows whether this build has CUDA (STYLE rule 20: the #if lives in device.cc alone).

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/backend.h"
#include "engine/executor.h"

namespace sluice::engine {

struct DeviceSelection {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int cuda_device = -1;
  // One line for the log that says what runs where and why (e.g. why auto fell back to the CPU).
  std::string description;
};

// "cpu": the CPU backend. "auto": GPU 0 if this build has the CUDA backend and a GPU is usable,
// else the CPU backend, with the reason in `description`. "cuda:N": GPU N or an error
// (FailedPrecondition when the device is missing or unusable or the build has no CUDA backend,
// InvalidArgument for anything else).
absl::StatusOr<DeviceSelection> SelectDevice(absl::string_view flag);

// Creates the CUDA executor for one instance of the model `spec` describes, on GPU `device`: the
// model's GPU implementation (weights read from spec.version_path), warmed up, every batch
// bucket's CUDA graph captured (unless config.cuda_graphs is false) and run once. `config` (the
// loaded model's own) is borrowed and must outlive the executor; `spec` is read during the call.
// Unimplemented when this build has no CUDA backend or the model has no GPU implementation
// (variable dims, BYTES tensors, a backend without one): the caller runs it on the CPU instead.
// Other errors fail the load (INTERNAL naming the CUDA call, RESOURCE_EXHAUSTED for device OOM).
absl::StatusOr<std::unique_ptr<Executor>> CreateCudaExecutor(const ModelSpec& spec,
                                                             const ModelConfig& config, int device,
                                                             ExecutorOptions options);

}  // namespace sluice::engine
