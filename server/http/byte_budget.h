#pragma once

// ByteBudget: a byte count shared by every HTTP connection (--http-max-inflight-bytes), so that
// the request bodies the server holds at once (being read, queued, running, being answered) are
// bounded as a whole and not only one connection at a time: 1,024 connections each allowed a
// 256 MiB body would otherwise be allowed 256 GiB between them.

#include <atomic>
#include <cstdint>

namespace sluice::server::http {

// Thread-safe (lock-free).
class ByteBudget {
 public:
  explicit ByteBudget(uint64_t limit_bytes) : limit_bytes_(limit_bytes) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // Takes `bytes` if they fit under the limit with what is held; false (nothing taken) if not.
  [[nodiscard]] bool TryAcquire(uint64_t bytes);
  // Gives back bytes an earlier TryAcquire took.
  void Release(uint64_t bytes);

  uint64_t used_bytes() const { return used_bytes_.load(std::memory_order_relaxed); }
  uint64_t limit_bytes() const { return limit_bytes_; }

 private:
  const uint64_t limit_bytes_;
  std::atomic<uint64_t> used_bytes_{0};
};

}  // namespace sluice::server::http
