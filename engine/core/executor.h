#pragma once

// Executor: runs batches of one model instance and answers their requests. The CPU executor
// (engine/cpu) is a thread that plays the stream and a completion thread that plays the events;
// the CUDA executor (engine/cuda) has the same shape with a real stream and events.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/inference_request.h"

namespace sluice::engine {

class ModelStats;

// Requests that run together, in queue order.
struct Batch {
  std::vector<std::unique_ptr<InferenceRequest>> requests;
  // Sum of the requests' batch sizes.
  int items = 0;
  // Sum of the requests' token_count: the batch's real tokens (ragged-batching sequence models;
  // 0 for other models).
  int64_t tokens = 0;
  // When the batcher handed it over (end of each request's queue time).
  std::chrono::steady_clock::time_point dispatch_time{};
};

// Thread-safety: HasFreeSlot() and InFlight() from any thread; Execute() from one thread at a time
// (the model's scheduler serializes it: its batcher, or an RPC thread it lets dispatch when
// ExecuteOnlyEnqueues()); Stop() from the owner.
class Executor {
 public:
  virtual ~Executor() = default;
  // Whether Execute() may be called now: a slot (staging buffers for one batch) is free. False
  // for good once the executor faulted (see ExecutorOptions::on_fault).
  virtual bool HasFreeSlot() const = 0;
  // Takes the batch and returns at once; every request is answered later on the executor's
  // threads. Except when ExecuteRunsBatch(): then it runs the batch and answers it on the
  // caller's thread before it returns. REQUIRES: HasFreeSlot().
  virtual void Execute(Batch batch) = 0;
  // Batches not yet finished, queued or running.
  virtual int InFlight() const = 0;
  // Whether Execute() only queues the batch for the executor's own threads (a lock, a push, a
  // notify: no device work, no copies, nothing that waits), so that the scheduler may call it on
  // the RPC thread that enqueued a lone request, saving the hop through the batcher thread. An
  // executor whose Execute() does device work (the CUDA executor) keeps the default, false.
  virtual bool ExecuteOnlyEnqueues() const { return false; }
  // Whether Execute() runs the batch to its answers on the caller's thread (the CPU executor of a
  // model with one instance: nothing to overlap, so the scheduler's batcher thread computes and
  // answers each batch itself, with no hand-off between the queue and the answers). Such an
  // Execute() is never called on an RPC thread (ExecuteOnlyEnqueues() is false), and
  // the scheduler does not wait for it where it would wait for a hand-over (Idle()).
  virtual bool ExecuteRunsBatch() const { return false; }
  // Finishes every batch taken, then joins the executor's threads. Idempotent.
  virtual void Stop() = 0;
  // Items this executor has run since it started, counted where it computes: the CPU executor's
  // thread counts each batch after running it; the CUDA executor's counter kernel adds to device
  // memory, and this copies that counter to pinned memory on the executor's own stats stream and
  // waits for it (ARCHITECTURE §2 rule 5). For the stats collector thread only, once per
  // interval: never call it on a request path. Monotonic; valid after Stop(). An executor without
  // counters: 0.
  virtual uint64_t ReadItemCounter() { return 0; }
  // Real tokens (ragged-batching models) this executor has run, as of its last ReadItemCounter()
  // (the same read: the CUDA executor's token counter comes with the item counter from device
  // memory, so the collector calls this right after ReadItemCounter, on its own thread). 0 for
  // other models.
  virtual uint64_t ReadTokenCounter() { return 0; }
};

struct ExecutorOptions {
  // Batches in flight at once (each holds its own staging buffers): enough to overlap gathering
  // and scattering with compute, few enough to bound memory.
  int slot_count = 2;
  // Called (on an executor thread) whenever a slot becomes free; must not block.
  std::function<void()> on_slot_freed;
  // Called once, on an executor thread, when the executor hits a fault that makes it unusable (a
  // CUDA error; a backend fault): the batch's requests were already failed INTERNAL. The engine
  // marks the model version not ready.
  std::function<void(const absl::Status&)> on_fault;
  // Where per-batch stats go; borrowed, must outlive the executor.
  ModelStats* stats = nullptr;
  // Test-only (EngineOptions::before_batch_for_test; SLUICE_TEST_FAULT_INJECT): called on the
  // executor thread before each batch runs. A non-OK status is that batch's fault, handled exactly
  // as a CUDA error or a backend fault would be (requests failed INTERNAL, then on_fault). Every
  // executor honours it, so the fault path is tested on every build. Empty in production.
  std::function<absl::Status()> before_batch_for_test;
};

}  // namespace sluice::engine
