#include "server/http/parts_gather.h"

#include <utility>

namespace sluice::server::http {

PartsGather::PartsGather(size_t parts, Done done)
    : done_(std::move(done)), remaining_(parts), answers_(parts) {}

bool PartsGather::Failed() const {
  common::MutexLock lock(&mu_);
  return !error_.ok();
}

void PartsGather::Complete(size_t part, absl::StatusOr<engine::InferenceResponse> result) {
  absl::Status error;
  std::vector<engine::InferenceResponse> answers;
  {
    common::MutexLock lock(&mu_);
    if (!result.ok()) {
      if (error_.ok()) error_ = result.status();
    } else {
      answers_[part] = *std::move(result);
    }
    if (--remaining_ > 0) return;
    // The last one: the others are done with the members.
    error = error_;
    answers = std::move(answers_);
  }
  // Outside the lock: `done_` answers the client.
  if (!error.ok()) {
    done_(error);
    return;
  }
  done_(std::move(answers));
}

}  // namespace sluice::server::http
