#pragma once

// Mutex, MutexLock, CondVar: std::mutex and std::condition_variable with Clang thread-safety
// annotations, so that ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED on the members they guard
// are checked by the compiler (-Wthread-safety in the clang sanitizer builds). libstdc++'s
// std::mutex carries no annotations, and absl::Mutex is not an option behind the gRPC boundary:
// Debian's Abseil is not built for TSan, so TSan would not see its synchronisation, while it sees
// std::mutex through its pthread interceptors (docs/reliability.md#sanitizers). Header-only;
// the same cost as the std types.

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace sluice::common {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable over a common::Mutex. Wait() may wake spuriously: callers loop on their
// condition, as with std::condition_variable.
class CondVar {
 public:
  // REQUIRES: `mu` held; held again on return.
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // As Wait(), until `deadline` at the latest.
  template <typename Clock, typename Duration>
  void WaitUntil(Mutex* mu, std::chrono::time_point<Clock, Duration> deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait_until(lock, deadline);
    lock.release();
  }
  // As Wait(), for at most `timeout`.
  template <typename Rep, typename Period>
  void WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait_for(lock, timeout);
    lock.release();
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace sluice::common
