#include "server/http/byte_budget.h"

#include "common/check.h"

namespace sluice::server::http {

bool ByteBudget::TryAcquire(uint64_t bytes) {
  uint64_t used = used_bytes_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_bytes_ || used > limit_bytes_ - bytes) return false;
  } while (!used_bytes_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return true;
}

void ByteBudget::Release(uint64_t bytes) {
  const uint64_t before = used_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  CHECK(before >= bytes);
}

}  // namespace sluice::server::http
