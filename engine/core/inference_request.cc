#include "engine/core/inference_request.h"

#include <utility>

namespace sluice::engine {

InferenceRequest::InferenceRequest(std::string model_name, int64_t model_version,
                                   Completion on_complete)
    : model_name_(std::move(model_name)),
      model_version_(model_version),
      on_complete_(std::move(on_complete)) {}

InferenceRequest::~InferenceRequest() {
  if (!completed()) {
    Complete(absl::InternalError("request was dropped by the engine without an answer"));
  }
}

bool InferenceRequest::Complete(absl::StatusOr<InferenceResponse> result) {
  if (completed_.exchange(true, std::memory_order_acq_rel)) return false;
  Completion done = std::move(on_complete_);
  on_complete_ = nullptr;
  if (done) done(std::move(result));
  // The caller's buffers are no longer needed once it has been answered.
  keepalive.reset();
  return true;
}

}  // namespace sluice::engine
