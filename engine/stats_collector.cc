#include "engine/stats_collector.h"

#include <utility>

namespace sluice::engine {

absl::StatusOr<std::unique_ptr<StatsCollector>> StatsCollector::Start(StatsCollectorOptions options,
                                                                      CollectFn collect) {
  if (options.interval.count() <= 0) {
    return absl::InvalidArgumentError("stats collector interval must be > 0 ms");
  }
  if (!collect) return absl::InvalidArgumentError("stats collector needs a collect function");
  return std::unique_ptr<StatsCollector>(new StatsCollector(options, std::move(collect)));
}

StatsCollector::StatsCollector(StatsCollectorOptions options, CollectFn collect)
    : options_(options), collect_(std::move(collect)) {
  thread_ = std::thread([this] { Loop(); });
}

StatsCollector::~StatsCollector() { Stop(); }

void StatsCollector::Stop() {
  std::lock_guard<std::mutex> stop_lock(stop_mu_);
  {
    common::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

uint64_t StatsCollector::collections() const {
  common::MutexLock lock(&mu_);
  return collections_;
}

void StatsCollector::Loop() {
  // Collections are scheduled on a fixed grid (not "interval after the last one ended") so the
  // throughput's time base does not drift with the collection's own cost.
  auto next = std::chrono::steady_clock::now();
  mu_.Lock();
  for (;;) {
    while (!stop_ && std::chrono::steady_clock::now() < next) cv_.WaitUntil(&mu_, next);
    if (stop_) break;
    mu_.Unlock();
    collect_(std::chrono::steady_clock::now());
    mu_.Lock();
    ++collections_;
    next += options_.interval;
    const auto now = std::chrono::steady_clock::now();
    if (next < now) next = now;  // a collection overran: skip the missed ticks
  }
  mu_.Unlock();
}

}  // namespace sluice::engine
