#pragma once

// ModelControl: the thread that runs model load/unload for the RPCs (RepositoryModelLoad /
// RepositoryModelUnload), one task at a time, in arrival order. Loads block for as long as
// loading takes, so they never run on gRPC's callback threads.

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace sluice::server {

// Thread-safe. Owns its one thread (started by the constructor, joined by the destructor).
class ModelControl {
 public:
  ModelControl();
  // Runs the pending tasks to completion, then joins the control thread.
  ~ModelControl();

  // Runs `task` on the control thread, after the tasks queued before it.
  void Run(std::function<void()> task);

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::thread thread_;
};

}  // namespace sluice::server
