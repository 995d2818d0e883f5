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
  // 0 (sluice's default: work-conserving): a batch that is not full goes as soon as an executor
  // is idle (nothing in flight), however few requests it holds, and waits while every executor
  // is busy: batches grow from what queues up while the executors work, which is where batching
  // pays. A full batch (max_batch_size, the token budget, a preferred size) goes to any free
  // slot. > 0 (Triton's max_queue_delay_microseconds): the oldest request waits up to this long
  // for a full or preferred batch, even while an executor is idle; then what is queued goes to
  // the next free slot.
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
// in service order: arrival order, level by level when the model has priority levels), for an
// executor with a free slot. `more_incompatible` says that another request waits behind them
// which cannot join this batch, so waiting for the batch to grow is pointless. `executor_idle`
// says that the executor has nothing in flight (it would start the batch at once).
//
// "What fits" is the longest prefix within max_batch_size items and, under a token budget,
// max_batch_tokens tokens; at least the first request, even one above either limit on its own (it
// runs alone rather than starve).
//
// Rules, in order: nothing queued -> wait; batching off -> take 1; the head reaches
// max_batch_size or max_batch_tokens (or the next request would overflow either, or an
// incompatible one waits) -> take what fits; the longest prefix whose item count is a preferred
// size -> take it; then
// - max_queue_delay 0: the executor is idle -> take what fits; else wait for an executor to
//   become idle (wake_at max(): only an arrival or a freed slot changes the decision);
// - max_queue_delay > 0: the oldest request waited max_queue_delay -> take what fits; else wait
//   until that delay expires.
BatchDecision DecideBatch(const BatchPolicy& policy, std::span<const PendingRequest> pending,
                          bool more_incompatible, bool executor_idle,
                          std::chrono::steady_clock::time_point now);

}  // namespace sluice::engine
