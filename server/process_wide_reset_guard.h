#pragma once

// Process-wide: process_wide_reset_guard.cc interposes libc's recvmsg and close to count the
// premature RST_STREAM frames clients send on the gRPC connections the accept guard accepted
// (process_wide_accept_guard.h), and closes a connection that sends more than a cap per second.
// Premature: the reset of one of the client's 256 newest streams before the client ended its
// side of it (HEADERS + RST_STREAM), or in the same read as the stream's HEADERS (HEADERS + DATA
// with END_STREAM + RST_STREAM back to back: the attack with whole requests, issue 37). Cancelling
// a call whose request the server had already read (a deadline, a user's cancel: 10,000 of them in
// CancellationTest) does not count.
// Why: gRPC 1.51 has no limit on streams a client resets (CVE-2023-44487, "rapid reset"; the
// upstream fix is not in Debian 12), and a stream reset before its message arrives never reaches
// the application: 10,000 HEADERS + RST_STREAM pairs grew the server by 56-67 MiB, 10,000
// HEADERS + DATA + RST_STREAM by 209 MiB, and the connection stayed open.
//
// What it sees: the bytes gRPC reads from the socket, so plaintext HTTP/2 only; a connection that
// does not start with the HTTP/2 client preface (TLS) is not inspected. What it does past the cap:
// it shows gRPC, in place of the frame past the cap, PING frames faster than
// --grpc-min-client-ping-interval-ms allows, so that gRPC itself sends GOAWAY ENHANCE_YOUR_CALM
// (debug data "too_many_pings") and closes the connection; later reads of it return end-of-stream.
// Where the PINGs do not fit in gRPC's read buffer, shutdown(2) instead (closed without GOAWAY).
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
