#pragma once

// The backend registry: the one table (backend_registry.cc) that names every backend a
// config.pbtxt may ask for, with its halves. Adding a backend is one entry there plus the backend's
// own files:
//
//   {.name = "mlp",                                  // config.pbtxt `backend: "mlp"`
//    .create_model = models::CreateMlpModel,         // the CPU half: reads the files, checks the
//                                                    // config, builds ModelInstances
//    .complete_config = nullptr,                     // optional: fills inputs/outputs from files
//    .create_gpu_executor = cuda::CreateMlpGpuExecutor}  // optional: the GPU half
//
// The engine asks nothing of a backend by name anywhere else: config completion, model creation
// and the choice of executor (executor_factory.cc) all go through FindBackend(). Thread-safe: the
// table is constant.

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/backend.h"
#include "engine/core/model_config.h"

namespace sluice::engine {

struct BackendRegistration {
  // The name config.pbtxt's `backend` field gives.
  absl::string_view name;
  // The CPU half, required: reads the version folder's files, checks the config against what the
  // backend supports (InvalidArgument naming the model and the field), returns the loaded model.
  absl::StatusOr<std::unique_ptr<Model>> (*create_model)(const ModelSpec& spec) = nullptr;
  // Optional (Triton's auto-complete): the config the model loads with, its inputs and outputs
  // filled in from the files and checked against what the config declares. Null: the config as
  // written.
  absl::StatusOr<ModelConfig> (*complete_config)(const ModelSpec& spec) = nullptr;
  // Optional: the GPU half (engine/core/backend.h, GpuExecutorFactory). Null, or a build without
  // CUDA: the model runs on the CPU backend on every device.
  GpuExecutorFactory create_gpu_executor = nullptr;
};

// Every registered backend, in name order.
std::span<const BackendRegistration> Backends();

// The registration of `name`. NotFound naming `model` and the unknown backend, and listing the
// known ones (so that a misspelled `backend: "encodr"` says so, before any other check).
absl::StatusOr<const BackendRegistration*> FindBackend(absl::string_view model,
                                                       absl::string_view name);

// The config `spec` loads with: the backend's complete_config, or spec.config unchanged when it
// has none. Runs before ValidateModelConfig. NotFound for an unknown backend; other errors name
// the model and the mismatch.
absl::StatusOr<ModelConfig> CompleteModelConfig(const ModelSpec& spec);

// Creates the model for `spec.config.backend` (its create_model). NotFound for an unknown backend
// (the message lists the known ones); InvalidArgument names the model and the offending field.
absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelSpec& spec);

// Backend names, in order, for messages and --help.
std::vector<std::string> KnownBackends();

}  // namespace sluice::engine
