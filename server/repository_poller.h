#pragma once

// RepositoryPoller: Triton's --model-control-mode=poll. A thread that every
// --repository-poll-secs scans the model repository and submits loads, reloads and unloads to the
// model control thread (ModelControl), the same path the explicit load/unload RPCs take: nothing
// loads on the poller's thread.
//
// What a scan sees of each model folder is a fingerprint: config.pbtxt and every file in the
// version folders (and one level below them), by name, size and modification time. A folder
// whose fingerprint differs from the previous scan is still being written: it waits for a scan
// that finds it unchanged ("stable") before it is loaded, so a half-copied folder is retried, not
// loaded broken. A stable fingerprint that differs from the one last submitted is (re)loaded; a
// model whose folder is gone is unloaded. A load that fails is recorded by the repository
// (UNAVAILABLE with the reason) and is retried when its files change again, not on every scan.
// A reload keeps the old versions serving until the new ones are ready (Engine::LoadModel).

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace sluice::common {
class Logger;
}

namespace sluice::server {

class ModelControl;
class ModelRepository;

struct RepositoryPollerOptions {
  // Time between two scans (--repository-poll-secs). Default 15 s, as Triton.
  std::chrono::milliseconds interval = std::chrono::seconds(15);
  // Files and folders looked at per model folder by one scan; beyond it the fingerprint covers
  // the first ones in name order and the log says so once. Bounds a scan of a hostile folder.
  int max_entries_per_model = 4096;
};

// Owns its one thread: Start() starts it, Stop() (or the destructor) stops and joins it.
// Start() and Stop() are called from one thread (the process's main thread).
class RepositoryPoller {
 public:
  // `repository`, `control` and `logger` are borrowed and must outlive the poller (Stop() it
  // before ModelControl::Stop()); `logger` may be null.
  RepositoryPoller(ModelRepository* repository, ModelControl* control, common::Logger* logger,
                   RepositoryPollerOptions options = {});
  ~RepositoryPoller();
  RepositoryPoller(const RepositoryPoller&) = delete;
  RepositoryPoller& operator=(const RepositoryPoller&) = delete;

  // Takes every model folder's fingerprint as what is loaded now. Call before the start-up load
  // (ModelRepository::LoadAll) so that a folder that changes during that load is reloaded by the
  // first scans. REQUIRES: the thread is not started.
  void Baseline();

  // Starts the thread; the first scan comes one interval later. REQUIRES: not started before.
  void Start();

  // Stops and joins the thread (a scan in progress finishes first; the loads it submitted are
  // the control thread's). Idempotent.
  void Stop();

  // One scan, on the caller's thread (the thread calls it every interval); for tests.
  void ScanForTest() { Scan(); }

 private:
  struct Seen {
    std::string last_scan;  // fingerprint found by the previous scan
    std::string submitted;  // fingerprint last submitted for loading ("" = none)
  };
  void Loop();
  void Scan();
  // The model folder's fingerprint (see the file comment).
  std::string Fingerprint(const std::string& name);

  ModelRepository* const repository_;
  ModelControl* const control_;
  common::Logger* const logger_;
  const RepositoryPollerOptions options_;
  // Touched by the poller's thread only (and by Baseline() before it starts).
  std::map<std::string, Seen> seen_;
  common::Mutex mu_;
  common::CondVar cv_;  // stop_ set
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sluice::server
