#include "engine/core/backend.h"

#include "absl/strings/str_cat.h"

namespace sluice::engine {

absl::StatusOr<std::vector<std::vector<Tensor>>> ModelInstance::RunRagged(
    std::span<const InferenceRequest* const>) {
  // The executor calls it only when runs_ragged() says so; reaching this is the backend's bug.
  return absl::InternalError("this model instance does not run ragged batches");
}

absl::Status Model::ValidateAndBindRequest(InferenceRequest& request) const {
  return absl::InternalError(absl::StrCat("model '", config().name, "' asked to validate request '",
                                          request.id, "' but validates no requests itself"));
}

absl::Status Model::PrepareRequest(InferenceRequest& request) const {
  return absl::InternalError(absl::StrCat("model '", config().name, "' asked to prepare request '",
                                          request.id, "' but prepares no requests"));
}

}  // namespace sluice::engine
