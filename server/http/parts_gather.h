#pragma once

// PartsGather: one HTTP request answered by several engine requests (its inputs split at the
// model's max_batch_size), each a "part". Every part's completion reports here; the last one
// calls `done` once, with every part's response in part order or the first error. Used by the
// OpenAI embeddings route and the text tasks (text_tasks.h).
//
// Thread-safe: parts complete on engine threads, in any order.

#include <cstddef>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "engine/core/inference_request.h"

namespace sluice::server::http {

class PartsGather {
 public:
  using Done = std::function<void(absl::StatusOr<std::vector<engine::InferenceResponse>>)>;

  // REQUIRES: parts >= 1.
  PartsGather(size_t parts, Done done);

  // Whether a part has failed already (then the parts not yet submitted need not run: the answer
  // is that error; complete them with any error instead).
  bool Failed() const;

  // Part `part`'s result. Exactly once per part.
  void Complete(size_t part, absl::StatusOr<engine::InferenceResponse> result);

 private:
  const Done done_;
  mutable common::Mutex mu_;
  size_t remaining_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::vector<engine::InferenceResponse> answers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::server::http
