#pragma once

// Answer: collects the answers one InferenceRequest gets, for engine tests (CPU and GPU). Shared
// with the completion callback, so that a late answer (after a failed wait) never touches a dead
// object. Test-only; header-only.

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/status/statusor.h"
#include "engine/inference_request.h"

namespace sluice::engine::testing {

class Answer {
 public:
  static InferenceRequest::Completion Into(std::shared_ptr<Answer> answer) {
    return [answer](absl::StatusOr<InferenceResponse> result) {
      std::lock_guard<std::mutex> lock(answer->mu_);
      if (answer->count_++ == 0) answer->result_ = std::move(result);
      answer->cv_.notify_all();
    };
  }

  // Whether an answer came within `timeout`.
  bool Wait(std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return count_ > 0; });
  }

  // The first answer, or DeadlineExceeded if none came within `timeout`.
  absl::StatusOr<InferenceResponse> WaitForResult(std::chrono::seconds timeout) {
    if (!Wait(timeout)) return absl::DeadlineExceededError("test: no answer");
    return result();
  }

  // How many times the request was answered (exactly once, for a correct engine).
  int count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }

  absl::StatusOr<InferenceResponse> result() const {
    std::lock_guard<std::mutex> lock(mu_);
    return result_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
  absl::StatusOr<InferenceResponse> result_ = absl::UnknownError("no answer");
};

}  // namespace sluice::engine::testing
