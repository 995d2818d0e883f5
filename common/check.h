#pragma once

// CHECK / DCHECK for broken internal invariants (never for external input: that is a Status).
// Abseil 20220623 has no absl/log, so these are ours. CHECK is always on; DCHECK only in debug.

#include <cstdio>
#include <cstdlib>

namespace sluice::internal {
[[noreturn]] inline void CheckFailed(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "FATAL %s:%d: CHECK failed: %s\n", file, line, expr);
  std::fflush(stderr);
  std::abort();
}
}  // namespace sluice::internal

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) ::sluice::internal::CheckFailed(#cond, __FILE__, __LINE__); \
  } while (false)

#ifdef NDEBUG
#define DCHECK(cond) \
  do {               \
  } while (false && (cond))
#else
#define DCHECK(cond) CHECK(cond)
#endif
