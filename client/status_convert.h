#pragma once

// Conversion of gRPC statuses to absl::Status at the client's edge (the mirror of the server's
// ToGrpcStatus). Pure functions; safe from any thread.

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace grpc {
class Status;
}  // namespace grpc

namespace sluice::client {

// `status` as an absl::Status with the same canonical code (gRPC and Abseil share the numbering)
// and the server's message unchanged, so callers and tests can match what the server said.
// UNAVAILABLE is the exception: it means the server could not be reached or answered that it (or
// the model) is not available, so its message gets the address in front:
// "<rpc> to <target>: <message>", e.g. "ServerLive to localhost:8001: failed to connect to all
// addresses; ...". An empty message becomes "<rpc>: <CODE> (no message from the server)".
// OK maps to OkStatus().
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view rpc,
                            absl::string_view target);

}  // namespace sluice::client
