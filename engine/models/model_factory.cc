// CreateModel: the one place that maps a backend name to its implementation.

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/backend.h"
#include "engine/models/encoder/encoder_model.h"
#include "engine/models/identity_model.h"
#include "engine/models/mlp_model.h"
#include "engine/models/simple_model.h"

namespace sluice::engine {

std::vector<std::string> KnownBackends() { return {"encoder", "identity", "mlp", "simple"}; }

absl::StatusOr<ModelConfig> CompleteModelConfig(const ModelSpec& spec) {
  if (spec.config.backend == "encoder") return models::CompleteEncoderConfig(spec);
  return spec.config;
}

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelSpec& spec) {
  const std::string& backend = spec.config.backend;
  if (backend == "simple") return models::CreateSimpleModel(spec);
  if (backend == "identity") return models::CreateIdentityModel(spec);
  if (backend == "mlp") return models::CreateMlpModel(spec);
  if (backend == "encoder") return models::CreateEncoderModel(spec);
  return absl::NotFoundError(absl::StrCat("model '", spec.config.name, "': unknown backend '",
                                          backend,
                                          "' (known: ", absl::StrJoin(KnownBackends(), ", "), ")"));
}

}  // namespace sluice::engine
