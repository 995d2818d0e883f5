#pragma once

// The dynamic batcher's decision, as a pure function of the queue and the clock, so that it can be
// tested exhaustively with a fake clock (the batcher thread only executes what this decides).

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

namespace sluice::engine {

struct BatchPolicy {
  // Items per batch at most. 0 or 1 with batching off behaves as "one request per batch".
  int max_batch_size = 0;
  // false: every request runs alone (Triton's default scheduler).
  bool batching_enabled = false;
  // How long the oldest request may wait for a fuller batch.
  std::chrono::microseconds max_queue_delay{0};
  // Sizes to flush at once when reachable; need not be sorted.
  std::vector<int> preferred_batch_sizes;
  // Ragged batching (sequence models): real tokens (PendingRequest::tokens summed) per batch at
  // most; 0 = no token budget. A request above the budget alone runs in a batch of its own.
  int64_t max_batch_tokens = 0;
};

// One queued request as the policy sees it.
struct PendingRequest {
  int batch_size = 1;
  std::chrono::steady_clock::time_point enqueue_time;
  // Real tokens (InferenceRequest::token_count); counted only under a token budget.
  int64_t tokens = 0;
};

struct BatchDecision {
  // Requests to take from the head of the queue now; 0 means wait.
  int request_count = 0;
  // When waiting: the time at which the decision may change without a new arrival (the oldest
  // request's delay expires); time_point::max() if only an arrival can change it.
  std::chrono::steady_clock::time_point wake_at = std::chrono::steady_clock::time_point::max();
};

// Decides for the queue head `pending` (the requests that may share a batch with the first one,
// in service order: arrival order, level by level when the model has priority levels).
// `more_incompatible` says that another request waits behind them which cannot join this batch, so
// waiting for the batch to grow is pointless.
//
// "What fits" is the longest prefix within max_batch_size items and, under a token budget,
// max_batch_tokens tokens; at least the first request, even one above either limit on its own (it
// runs alone rather than starve).
//
// Rules, in order: nothing queued -> wait; batching off -> take 1; the head reaches
// max_batch_size or max_batch_tokens (or the next request would overflow either, or an
// incompatible one waits) -> take what fits; the longest prefix whose item count is a preferred
// size -> take it; the oldest request waited max_queue_delay -> take what fits; else wait until
// that delay expires.
BatchDecision DecideBatch(const BatchPolicy& policy, std::span<const PendingRequest> pending,
                          bool more_incompatible, std::chrono::steady_clock::time_point now);

}  // namespace sluice::engine
