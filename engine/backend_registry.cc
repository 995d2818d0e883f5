#include "engine/backend_registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/models/encoder/encoder_model.h"
#include "engine/models/identity_model.h"
#include "engine/models/mlp_model.h"
#include "engine/models/simple_model.h"

// With device.cc, the only code that knows whether this build has CUDA (STYLE rule 20): the
// facade links the CUDA target only when it is built, and the GPU halves are named here.
#if SLUICE_HAVE_CUDA
#include "engine/cuda/cuda_backends.h"
#define SLUICE_GPU(factory) (factory)
#else
#define SLUICE_GPU(factory) nullptr
#endif

namespace sluice::engine {
namespace {

// In name order (KnownBackends lists them so).
constexpr BackendRegistration kBackends[] = {
    {.name = "encoder",
     .create_model = models::CreateEncoderModel,
     .complete_config = models::CompleteEncoderConfig,
     .create_gpu_executor = SLUICE_GPU(cuda::CreateEncoderGpuExecutor)},
    {.name = "identity",
     .create_model = models::CreateIdentityModel,
     .create_gpu_executor = SLUICE_GPU(cuda::CreateIdentityGpuExecutor)},
    {.name = "mlp",
     .create_model = models::CreateMlpModel,
     .create_gpu_executor = SLUICE_GPU(cuda::CreateMlpGpuExecutor)},
    {.name = "simple",
     .create_model = models::CreateSimpleModel,
     .create_gpu_executor = SLUICE_GPU(cuda::CreateSimpleGpuExecutor)},
};

}  // namespace

std::span<const BackendRegistration> Backends() { return kBackends; }

std::vector<std::string> KnownBackends() {
  std::vector<std::string> names;
  for (const BackendRegistration& backend : kBackends) names.emplace_back(backend.name);
  return names;
}

absl::StatusOr<const BackendRegistration*> FindBackend(absl::string_view model,
                                                       absl::string_view name) {
  for (const BackendRegistration& backend : kBackends) {
    if (backend.name == name) return &backend;
  }
  return absl::NotFoundError(absl::StrCat("model '", model, "': unknown backend '", name,
                                          "' (known: ", absl::StrJoin(KnownBackends(), ", "), ")"));
}

absl::StatusOr<ModelConfig> CompleteModelConfig(const ModelSpec& spec) {
  ASSIGN_OR_RETURN(const BackendRegistration* backend,
                   FindBackend(spec.config.name, spec.config.backend));
  if (backend->complete_config == nullptr) return spec.config;
  return backend->complete_config(spec);
}

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelSpec& spec) {
  ASSIGN_OR_RETURN(const BackendRegistration* backend,
                   FindBackend(spec.config.name, spec.config.backend));
  return backend->create_model(spec);
}

}  // namespace sluice::engine
