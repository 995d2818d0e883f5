#pragma once

// ModelControl: the thread that runs model load/unload for the RPCs (RepositoryModelLoad /
// RepositoryModelUnload), one task at a time, in arrival order. Loads block for as long as
// loading takes, so they never run on gRPC's callback threads.
//
// Bounded and cancellable (issue 17 item 8): at most `max_pending` tasks wait (then Submit()
// answers RESOURCE_EXHAUSTED); a task whose client gave up while it waited is answered CANCELLED
// and never runs; and Stop() holds a deadline whatever the running task does (a read blocked in
// a hung mount): the running task's caller is answered UNAVAILABLE at the deadline, and Stop()
// returns false without joining the thread, which is then stuck in a system call. Joining would
// hang the exit and detaching would break "every thread has one owner" (and let exit()'s
// destructors free what it uses), so after a false Stop() the owner ends the process with
// _exit() once it has flushed (server/main/server_main.cc): the thread stays owned until the
// process goes.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"

namespace sluice::server {

struct ModelControlOptions {
  // Tasks that may wait behind the running one; beyond it Submit() answers RESOURCE_EXHAUSTED.
  int max_pending = 16;
};

// Thread-safe. Owns its one thread (started by the constructor, joined by Stop()).
class ModelControl {
 public:
  struct Task {
    // Runs on the control thread: the load or unload.
    std::function<absl::Status()> work;
    // Called exactly once with the outcome: work()'s status, CANCELLED (abandoned), or
    // UNAVAILABLE (stopped before or while it ran). From the control thread or Stop()'s caller.
    std::function<void(const absl::Status&)> answer;
    // Nullable: whether the caller gave up (its RPC was cancelled or its deadline passed);
    // checked just before work() would start.
    std::function<bool()> abandoned;
    // Names the task in messages: "load of model 'm'".
    std::string what;
  };

  explicit ModelControl(ModelControlOptions options = {});
  // Stop() without a deadline.
  ~ModelControl();

  // Queues `task`. ResourceExhausted when max_pending tasks already wait, Unavailable once
  // stopping; `task.answer` is not called then (the caller answers with that status).
  absl::Status Submit(Task task);

  // Answers every queued task UNAVAILABLE, waits for the running one until `deadline`, and joins
  // the thread. Returns false if the running task was still running at the deadline: it has
  // been answered UNAVAILABLE, the thread is not joined, and the caller must end the process
  // with _exit() rather than destroy this object. Idempotent once it returned true.
  bool Stop(std::chrono::steady_clock::time_point deadline =
                std::chrono::steady_clock::time_point::max());

  // Tasks waiting (not the running one); for tests.
  int PendingForTest() const;

 private:
  struct Queued {
    Task task;
    // Set by whoever answers first (the control thread, or Stop() at its deadline).
    std::shared_ptr<std::atomic<bool>> answered = std::make_shared<std::atomic<bool>>(false);
  };
  static void AnswerOnce(Queued& queued, const absl::Status& status);
  void Loop();

  const ModelControlOptions options_;
  mutable common::Mutex mu_;
  common::CondVar cv_;       // tasks queued, or stopping
  common::CondVar idle_cv_;  // the running task finished
  std::deque<Queued> tasks_ ABSL_GUARDED_BY(mu_);
  // The task being run (answered flag and what), so that Stop() can answer it at its deadline.
  std::shared_ptr<Queued> running_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool exited_ ABSL_GUARDED_BY(mu_) = false;  // the loop has returned
  std::thread thread_;
};

}  // namespace sluice::server
