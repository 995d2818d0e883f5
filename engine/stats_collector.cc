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
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t StatsCollector::collections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return collections_;
}

void StatsCollector::Loop() {
  // Collections are scheduled on a fixed grid (not "interval after the last one ended") so the
  // throughput's time base does not drift with the collection's own cost.
  auto next = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (cv_.wait_until(lock, next, [&] { return stop_; })) return;
    lock.unlock();
    collect_(std::chrono::steady_clock::now());
    lock.lock();
    ++collections_;
    next += options_.interval;
    const auto now = std::chrono::steady_clock::now();
    if (next < now) next = now;  // a collection overran: skip the missed ticks
  }
}

}  // namespace sluice::engine
