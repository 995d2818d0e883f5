#pragma once

// Clock: the source of time for everything that schedules (the batcher, queue timeouts), injected
// so tests drive time by hand (FakeClock) instead of sleeping.

#include <atomic>
#include <chrono>

namespace sluice::common {

// A monotonic clock. Implementations are safe for concurrent use from any thread.
class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
};

// The process's steady clock. Stateless; Default() returns a process-wide instance.
class SteadyClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  static const Clock& Default();
};

// A clock that only moves when told to. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimePoint start = TimePoint{}) : now_ns_(start.time_since_epoch().count()) {}
  TimePoint Now() const override {
    return TimePoint{std::chrono::steady_clock::duration{now_ns_.load()}};
  }
  void Advance(std::chrono::steady_clock::duration d) { now_ns_ += d.count(); }

 private:
  std::atomic<std::chrono::steady_clock::rep> now_ns_;
};

}  // namespace sluice::common
