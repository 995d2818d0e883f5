#pragma once

// Answer: collects the answers one InferenceRequest gets; AnswerLog: the answers of many requests,
// by request id, in the order they came. For engine tests (CPU and GPU): the one answer collector
// they share. Both are shared with the completion callbacks (Into), so that a late answer (after
// a failed wait) never touches a dead object. Test-only; header-only.

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/inference_request.h"

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

class AnswerLog {
 public:
  static constexpr std::chrono::seconds kDefaultTimeout{10};

  // A completion that records its answer under `id`; it keeps `log` alive.
  static InferenceRequest::Completion Into(std::shared_ptr<AnswerLog> log, std::string id = "") {
    log->Issue(id);
    return
        [log, id](absl::StatusOr<InferenceResponse> result) { log->Record(id, result.status()); };
  }
  // The same for a log that outlives every request it answers (a test fixture's member).
  InferenceRequest::Completion For(const std::string& id) {
    Issue(id);
    return [this, id](absl::StatusOr<InferenceResponse> result) { Record(id, result.status()); };
  }

  // Whether `id` was answered within `timeout`.
  bool WaitFor(const std::string& id, std::chrono::seconds timeout = kDefaultTimeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return by_id_.count(id) > 0; });
  }
  // Whether `n` answers (of any ids) came within `timeout`.
  bool WaitForCount(size_t n, std::chrono::seconds timeout = kDefaultTimeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return codes_.size() >= n; });
  }

  // How many answers `id` got (exactly one, for a correct engine).
  int Count(const std::string& id) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_id_.find(id);
    return it == by_id_.end() ? 0 : static_cast<int>(it->second.size());
  }
  // The first answer's status; Unknown("no answer") if there was none.
  absl::Status StatusOf(const std::string& id) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return absl::UnknownError("no answer");
    return it->second.front();
  }
  // Answers so far, of any ids.
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return codes_.size();
  }
  // Every answer's code, in the order they came.
  std::vector<absl::StatusCode> codes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return codes_;
  }
  // The ids completions were made for, in order.
  std::vector<std::string> issued() const {
    std::lock_guard<std::mutex> lock(mu_);
    return issued_;
  }

 private:
  void Issue(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    issued_.push_back(id);
  }
  void Record(const std::string& id, absl::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    codes_.push_back(status.code());
    by_id_[id].push_back(std::move(status));
    cv_.notify_all();
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> issued_;
  std::vector<absl::StatusCode> codes_;
  std::map<std::string, std::vector<absl::Status>> by_id_;
};

}  // namespace sluice::engine::testing
