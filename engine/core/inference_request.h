#pragma once

// InferenceRequest: one client request on its way through the engine, and InferenceResponse, its
// answer. The request borrows its input bytes (TensorView) from whatever the caller keeps alive
// through `keepalive` (for the gRPC server: the request message), and is completed exactly once,
// by whichever engine thread finishes with it.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"

namespace sluice::engine {

struct InferenceResponse {
  std::string model_name;
  int64_t model_version = 0;
  std::string id;
  // Requested outputs (all of the model's outputs if the request named none), in the order the
  // request named them (else config order).
  std::vector<Tensor> outputs;
};

// How a model that tokenizes text (BYTES `text` / `text_pair` inputs) treats this request's
// over-long texts: the "truncate", "truncation_direction" and "max_text_pair_tokens" request
// parameters (KServe v2 over gRPC and HTTP; the text routes set them from their own fields).
// Models that take no text ignore it. The defaults keep the model's own policy.
struct TextTruncation {
  // true: a text (or pair) longer than the model's length limit is cut to it; false: refused with
  // InvalidArgument naming its length and the limit. Unset: the model's default (its tokenizer's
  // truncation block cuts; without one, refused).
  std::optional<bool> truncate;
  // Cut tokens from the start of the text instead of its end.
  bool from_left = false;
  // `text_pair` only: each second text keeps at most this many of its own tokens (its first
  // ones) before the length limit applies (Cohere's max_tokens_per_doc). 0: no cap.
  int64_t max_text_pair_tokens = 0;
};

// Not thread-safe except Complete(), which may race with itself and wins once.
class InferenceRequest {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // Runs once, on an engine thread (or the submitting thread when the request is rejected at
  // once). Must not block: it hands the result to the RPC layer and returns.
  using Completion = std::function<void(absl::StatusOr<InferenceResponse>)>;

  // `model_version` < 0 means "the newest ready version".
  InferenceRequest(std::string model_name, int64_t model_version, Completion on_complete);
  // A request destroyed without an answer is answered with INTERNAL here, so that no accepted
  // request is ever lost silently.
  ~InferenceRequest();
  InferenceRequest(const InferenceRequest&) = delete;
  InferenceRequest& operator=(const InferenceRequest&) = delete;

  // Delivers the result. Returns true the first time; later calls do nothing and return false.
  bool Complete(absl::StatusOr<InferenceResponse> result);
  bool completed() const { return completed_.load(std::memory_order_acquire); }

  const std::string& model_name() const { return model_name_; }
  int64_t model_version() const { return model_version_; }

  // The client's request id, echoed in the response.
  std::string id;
  // Input tensors, borrowed; valid while `keepalive` is held.
  std::vector<TensorView> inputs;
  // Output names the client asked for; empty means all.
  std::vector<std::string> requested_outputs;
  // Owns whatever the input views point into; released after Complete().
  std::shared_ptr<const void> keepalive;
  // When the server received the request (start of its end-to-end duration).
  TimePoint received_time{};
  // The client's own deadline (its gRPC deadline): a request still queued then fails with
  // DEADLINE_EXCEEDED, since nobody waits for its answer any more. Always honoured.
  std::optional<TimePoint> deadline;
  // Set by the RPC layer, from any thread, when the client cancels the call or goes away. A
  // request still queued then leaves the queue (within ModelScheduler's sweep period), answered
  // CANCELLED and counted, without running: nobody reads its answer. Null: not cancellable.
  std::shared_ptr<const std::atomic<bool>> cancelled;
  bool IsCancelled() const {
    return cancelled != nullptr && cancelled->load(std::memory_order_relaxed);
  }
  // A queue timeout the client asked for (the "timeout" request parameter); it replaces the
  // model's default_timeout only where the config sets allow_timeout_override.
  std::optional<std::chrono::microseconds> timeout;
  // The priority level the client asked for (the "priority" request parameter). 0, or a level the
  // model does not have, means the model's default_priority_level (as in Triton).
  uint64_t priority = 0;
  // Over-long text inputs (models that tokenize; see TextTruncation).
  TextTruncation text_truncation;
  // Models that tokenize text: which of the model's sentence-transformers prompts to prepend to
  // every text (the "prompt_name" request parameter; the text routes' own field). Unset or empty:
  // the model's default prompt, if it names one. A name the model lacks is InvalidArgument.
  std::optional<std::string> prompt_name;

  // --- Set by the engine ---------------------------------------------------------------------
  // Items in this request: the first dimension of its inputs (1 for models without batching).
  int batch_size = 1;
  // Real tokens in this request (sequence models; set by request validation before Enqueue), 0
  // otherwise.
  int64_t token_count = 0;
  TimePoint enqueue_time{};
  // The version that serves it (resolved from model_version at submit).
  int64_t resolved_version = 0;

 private:
  const std::string model_name_;
  const int64_t model_version_;
  Completion on_complete_;
  std::atomic<bool> completed_{false};
};

}  // namespace sluice::engine
