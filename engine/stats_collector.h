#pragma once

// StatsCollector: the metrics collector thread (ARCHITECTURE §2 rule 5). Every `interval` it calls
// one collect function, which reads the executors' item counters (on a GPU: copies the device
// counters to pinned memory on a stream of its own, the only place besides the completion thread
// that waits for a device) and publishes them with the throughput over the interval. It never runs
// per request, and nothing on the request path waits for it.
//
// Owned by the Engine (EngineOptions::stats_interval > 0), which hands it Engine::CollectStats:
// the collector must reach the executors, which only the engine owns, and must stop before the
// models it reads are freed.
//
// Thread-safe: Stop() may be called from any thread, several times; the collect function runs on
// the collector thread only.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace sluice::engine {

struct StatsCollectorOptions {
  // Time between two collections. > 0.
  std::chrono::milliseconds interval{1000};
};

class StatsCollector {
 public:
  // Called with the steady time of the collection. Must not block for long (one interval at
  // most) and must not call back into the collector.
  using CollectFn = std::function<void(std::chrono::steady_clock::time_point now)>;

  // Starts the thread; it collects once at once, then every interval. InvalidArgument if the
  // interval is not positive or `collect` is empty.
  static absl::StatusOr<std::unique_ptr<StatsCollector>> Start(StatsCollectorOptions options,
                                                               CollectFn collect);
  // Stop()s.
  ~StatsCollector();
  StatsCollector(const StatsCollector&) = delete;
  StatsCollector& operator=(const StatsCollector&) = delete;

  // Wakes the thread, lets a running collection finish, joins. Idempotent.
  void Stop();

  // Collections run so far.
  uint64_t collections() const;

 private:
  StatsCollector(StatsCollectorOptions options, CollectFn collect);
  void Loop();

  const StatsCollectorOptions options_;
  const CollectFn collect_;
  mutable common::Mutex mu_;
  common::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t collections_ ABSL_GUARDED_BY(mu_) = 0;
  std::mutex stop_mu_;  // serializes Stop(): one caller joins, the others wait
  std::thread thread_;
};

}  // namespace sluice::engine
