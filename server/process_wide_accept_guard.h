#pragma once

// Process-wide: process_wide_accept_guard.cc interposes libc's accept4 for every caller in the
// process (gRPC's TCP listener calls it; civetweb, the metrics server, calls accept and is not
// affected). Why: gRPC 1.51's listener (src/core/lib/iomgr/tcp_server_posix.cc, on_read) stops
// for good on any accept4 error other than EINTR and EAGAIN: one EMFILE during a connection
// burst, or one of the network errors Linux passes on from a pending connection (accept(2):
// ENETDOWN, EPROTO, ...), and the port never accepts again while the process looks healthy.
// The guard
//  - retries on the network errors accept(2) says to treat like EAGAIN;
//  - on EMFILE/ENFILE frees a spare descriptor, accepts and closes the pending connection, takes
//    the spare back, and goes on (so gRPC sees EAGAIN at worst, never EMFILE);
//  - refuses (accepts and closes at once) a connection whose descriptor number reaches the
//    ceiling: descriptors are handed out lowest-first, so that number is the count of
//    descriptors the process has open, and a ceiling below the fd limit keeps room for files,
//    models and the watchdog.
// Thread-safe: the settings are atomics; accept4 may run on any thread.

#include <cstdint>

namespace sluice::server {

struct AcceptGuardOptions {
  // Connections whose descriptor number would be >= this are refused; 0: no ceiling.
  int fd_ceiling = 0;
  // Test-only: after this many accepted connections, accept4 fails with EBADF once, which
  // stops gRPC 1.51's listener for good (as EMFILE did before the guard), so tests can show the
  // listener watchdog at work. -1: never. Set only from SLUICE_TEST_BREAK_GRPC_LISTENER_AFTER.
  int64_t break_listener_after_accepts_for_test = -1;
};

// Arms the guard (before the gRPC server starts). Until then accept4 passes through unchanged.
void ConfigureAcceptGuard(const AcceptGuardOptions& options);

struct AcceptGuardCounts {
  int64_t refused_over_ceiling = 0;  // accepted and closed at once: descriptor over the ceiling
  int64_t refused_fd_exhausted = 0;  // EMFILE/ENFILE: pending connection accepted on the spare
  int64_t retried_errors = 0;        // network errors retried instead of passed to the caller
};
AcceptGuardCounts GetAcceptGuardCounts();

}  // namespace sluice::server
