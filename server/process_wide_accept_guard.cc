// Process-wide: interposes libc's accept4 (process_wide_accept_guard.h says why and what).

#include "server/process_wide_accept_guard.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "server/process_wide_reset_guard.h"

// Defined only in sanitizer builds (compiler-rt's interceptors, clang 14 naming).
extern "C" int __interceptor_accept4(int, sockaddr*, socklen_t*, int) __attribute__((weak));

namespace sluice::server {
namespace {

std::atomic<bool> armed{false};
std::atomic<int> fd_ceiling{0};
std::atomic<int64_t> break_after{-1};
std::atomic<int64_t> accepted{0};
std::atomic<int64_t> refused_over_ceiling{0};
std::atomic<int64_t> refused_fd_exhausted{0};
std::atomic<int64_t> retried_errors{0};

// One descriptor held in reserve for EMFILE: closing it makes room to accept (and close) the
// pending connection, which otherwise stays in the backlog and wakes the listener again at once.
std::mutex spare_mu;
int spare_fd = -1;  // guarded by spare_mu

int OpenSpare() { return open("/dev/null", O_RDONLY | O_CLOEXEC); }

using Accept4 = int (*)(int, sockaddr*, socklen_t*, int);
// In sanitizer builds the runtime's interceptor comes first (it tracks descriptors); a definition
// in the executable replaces its weak alias, so this calls it by name.
Accept4 LibcAccept4() {
  static const Accept4 libc_accept4 = __interceptor_accept4 != nullptr
                                          ? &__interceptor_accept4
                                          : reinterpret_cast<Accept4>(dlsym(RTLD_NEXT, "accept4"));
  return libc_accept4;
}

// accept(2): "Linux accept() passes already-pending network errors on the new socket as an
// error code from accept() ... the application should ... treat them like EAGAIN by retrying".
bool IsPendingNetworkError(int error) {
  switch (error) {
    case ENETDOWN:
    case EPROTO:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH:
    case ECONNABORTED:
      return true;
    default:
      return false;
  }
}

}  // namespace

void ConfigureAcceptGuard(const AcceptGuardOptions& options) {
  fd_ceiling.store(options.fd_ceiling);
  break_after.store(options.break_listener_after_accepts_for_test);
  {
    std::lock_guard<std::mutex> lock(spare_mu);
    if (spare_fd < 0) spare_fd = OpenSpare();
  }
  armed.store(true);
}

AcceptGuardCounts GetAcceptGuardCounts() {
  AcceptGuardCounts counts;
  counts.refused_over_ceiling = refused_over_ceiling.load(std::memory_order_relaxed);
  counts.refused_fd_exhausted = refused_fd_exhausted.load(std::memory_order_relaxed);
  counts.retried_errors = retried_errors.load(std::memory_order_relaxed);
  return counts;
}

}  // namespace sluice::server

// The interposer; the executable exports it (server/CMakeLists.txt) so that libgrpc's calls
// through its PLT reach it.
extern "C" int accept4(int listener, sockaddr* address, socklen_t* length, int flags) {
  using namespace sluice::server;  // NOLINT: the file's own namespace, from extern "C"
  if (!armed.load(std::memory_order_relaxed)) {
    return LibcAccept4()(listener, address, length, flags);
  }
  const socklen_t length_in = length != nullptr ? *length : 0;
  for (;;) {
    if (length != nullptr) *length = length_in;
    const int fd = LibcAccept4()(listener, address, length, flags);
    if (fd >= 0) {
      const int64_t before = accepted.fetch_add(1, std::memory_order_relaxed);
      if (before == break_after.load(std::memory_order_relaxed)) {
        close(fd);
        errno = EBADF;
        return -1;
      }
      const int ceiling = fd_ceiling.load(std::memory_order_relaxed);
      if (ceiling > 0 && fd >= ceiling) {
        close(fd);
        refused_over_ceiling.fetch_add(1, std::memory_order_relaxed);
        continue;  // drain the backlog: each pending connection is refused the same way
      }
      TrackAcceptedConnection(fd);
      return fd;
    }
    const int error = errno;
    if (error == EINTR || error == EAGAIN) return fd;  // gRPC handles both
    if (IsPendingNetworkError(error)) {
      retried_errors.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (error == EMFILE || error == ENFILE) {
      std::lock_guard<std::mutex> lock(spare_mu);
      if (spare_fd >= 0) {
        close(spare_fd);
        spare_fd = -1;
        if (length != nullptr) *length = length_in;
        const int pending = LibcAccept4()(listener, address, length, flags | SOCK_CLOEXEC);
        if (pending >= 0) {
          close(pending);
          refused_fd_exhausted.fetch_add(1, std::memory_order_relaxed);
        }
        spare_fd = OpenSpare();
        if (pending >= 0) continue;
      }
      // No spare (or the pending connection went away): gRPC re-arms on EAGAIN and tries again
      // when the next connection arrives, rather than stopping the listener.
      errno = EAGAIN;
      return -1;
    }
    errno = error;
    return fd;
  }
}
