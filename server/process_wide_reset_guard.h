#pragma once

// Process-wide: process_wide_reset_guard.cc interposes libc's recvmsg and close to count the
// premature RST_STREAM frames clients send on the gRPC connections the accept guard accepted
// (process_wide_accept_guard.h), and closes a connection that sends more than a cap per second.
// Premature: the reset of one of the client's 256 newest streams before the client ended its
// side of it (HEADERS + RST_STREAM, the attack); cancelling a call whose request was sent in full
// (a deadline, a user's cancel: 10,000 of them in 2.6 s in CancellationTest) does not count.
// Why: gRPC 1.51 has no limit on streams a client resets (CVE-2023-44487, "rapid reset"; the
// upstream fix is not in Debian 12), and a stream reset before its message arrives never reaches
// the application: 10,000 HEADERS + RST_STREAM pairs grew the server by 56-67 MiB and went on
// growing after the connection closed.
//
// What it sees: the bytes gRPC reads from the socket, so plaintext HTTP/2 only; a connection that
// does not start with the HTTP/2 client preface (TLS) is not inspected. What it does past the cap:
// shutdown(2) on the socket, which gRPC then reads as the peer closing; no GOAWAY (gRPC writes
// the socket, and nothing outside it can add a frame safely).
// Thread-safety: one mutex around the per-connection parsers; recvmsg and close run on any thread.

#include <cstdint>

namespace sluice::server {

struct ResetGuardOptions {
  // Premature RST_STREAM frames one connection may send per second (a fixed one-second window);
  // 0 turns the guard off.
  int max_resets_per_second = 0;
};

// Arms the guard (before the gRPC server starts).
void ConfigureResetGuard(const ResetGuardOptions& options);

// Called by the accept guard for every connection it hands to gRPC.
void TrackAcceptedConnection(int fd);

// Connections closed for sending resets past the cap, since start.
int64_t ResetGuardClosedConnections();

}  // namespace sluice::server
