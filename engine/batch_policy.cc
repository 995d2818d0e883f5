#include "engine/batch_policy.h"

#include <algorithm>

namespace sluice::engine {

BatchDecision DecideBatch(const BatchPolicy& policy, std::span<const PendingRequest> pending,
                          bool more_incompatible, bool executor_idle,
                          std::chrono::steady_clock::time_point now) {
  BatchDecision decision;
  if (pending.empty()) return decision;
  if (!policy.batching_enabled || policy.max_batch_size <= 1) {
    decision.request_count = 1;
    return decision;
  }

  // The prefix that fits in one batch, and the longest prefix whose size is preferred.
  const bool token_budget = policy.max_batch_tokens > 0;
  int items = 0;
  int64_t tokens = 0;
  int fitting = 0;
  int preferred_prefix = 0;
  for (const PendingRequest& request : pending) {
    if (items + request.batch_size > policy.max_batch_size) break;
    if (token_budget && tokens + request.tokens > policy.max_batch_tokens) break;
    items += request.batch_size;
    tokens += request.tokens;
    ++fitting;
    if (std::find(policy.preferred_batch_sizes.begin(), policy.preferred_batch_sizes.end(),
                  items) != policy.preferred_batch_sizes.end()) {
      preferred_prefix = fitting;
    }
  }
  // The head alone overflows a limit: a request above max_batch_size is rejected at submit (be
  // safe anyway); one above the token budget runs alone, now, since waiting cannot help it.
  if (fitting == 0) {
    decision.request_count = 1;
    return decision;
  }

  const bool full = items == policy.max_batch_size ||
                    (token_budget && tokens == policy.max_batch_tokens) ||
                    fitting < static_cast<int>(pending.size()) || more_incompatible;
  if (full) {
    decision.request_count = fitting;
    return decision;
  }
  if (preferred_prefix > 0) {
    decision.request_count = preferred_prefix;
    return decision;
  }
  if (policy.max_queue_delay.count() <= 0) {
    // Work-conserving: an idle executor never waits for company that may not come; a busy one
    // lets the batch grow until it is free (or the batch is full, above).
    if (executor_idle) decision.request_count = fitting;
    return decision;
  }
  // The oldest request, which with priority levels need not be the head.
  auto oldest = pending.front().enqueue_time;
  for (const PendingRequest& request : pending) oldest = std::min(oldest, request.enqueue_time);
  const auto deadline = oldest + policy.max_queue_delay;
  if (now >= deadline) {
    decision.request_count = fitting;
    return decision;
  }
  decision.wake_at = deadline;
  return decision;
}

}  // namespace sluice::engine
