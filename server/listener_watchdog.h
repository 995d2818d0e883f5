#pragma once

// ListenerWatchdog: checks, from inside the process, that the gRPC port still accepts
// connections, with a real call (ServerLive) on a new connection to itself every interval. gRPC
// 1.51's listener can stop accepting for good while every open connection, /metrics and the
// process itself look healthy (process_wide_accept_guard.h); a TCP-only probe still passes then,
// because the kernel completes connections into the backlog of a socket nobody accepts from.
//
// A probe fails only when its call's deadline passes: a listener that accepts and closes (a
// connection over the ceiling, a plaintext probe against a TLS port) answers at once with
// UNAVAILABLE, which proves the accept loop runs, so an attacker holding connections cannot make
// the watchdog restart the server. After `failures_to_trip` consecutive failures it calls
// `on_change(false)` (main turns liveness NOT_SERVING and logs); after a success,
// `on_change(true)`.
//
// Owned by main. Starts one thread, stopped and joined by Stop() or the destructor.
// Thread-safety: Stop() may be called from any thread, once or more.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace sluice::common {
class Logger;
}

namespace sluice::server {

struct ListenerWatchdogOptions {
  // "127.0.0.1:8001": where the probes connect (the bound port, over loopback).
  std::string target;
  // Time between probes.
  std::chrono::milliseconds interval{5000};
  // Deadline of one probe call (connection, handshake and answer).
  std::chrono::milliseconds probe_timeout{2000};
  // Consecutive failed probes before the listener counts as dead.
  int failures_to_trip = 3;
  // Called from the watchdog thread when the verdict changes; must not block long.
  std::function<void(bool accepting)> on_change;
  // Borrowed, nullable, must outlive the watchdog.
  common::Logger* logger = nullptr;
};

class ListenerWatchdog {
 public:
  // Starts the thread; the first probe runs after one interval.
  static std::unique_ptr<ListenerWatchdog> Start(ListenerWatchdogOptions options);
  ~ListenerWatchdog();
  ListenerWatchdog(const ListenerWatchdog&) = delete;
  ListenerWatchdog& operator=(const ListenerWatchdog&) = delete;

  // Stops probing and joins the thread (waits for a probe in progress, at most probe_timeout).
  void Stop();

 private:
  explicit ListenerWatchdog(ListenerWatchdogOptions options);
  void Loop();

  const ListenerWatchdogOptions options_;
  common::Mutex mu_;
  common::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sluice::server
