#pragma once

// The gRPC front end's server, built from the flags: the listening port and its credentials
// (plaintext, TLS or mutual TLS), message sizes and compressed requests, the transport's memory
// quota, the connection policy (streams, keep-alive, pings), and the process-wide connection
// guards (descriptor ceiling, rapid-reset limit). Used once, by the start-up (server_process.h).

#include <sys/resource.h>

#include <memory>

#include "absl/status/statusor.h"

namespace grpc {
class Server;
}

namespace sluice::common {
class Logger;
}

namespace sluice::server {

class InferenceService;
class ServingState;
struct ServerFlags;

// A started gRPC server and the port it bound (--grpc-port=0 picks one).
struct GrpcServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

// Builds and starts the server of `service` (borrowed; it must outlive the server) on
// --grpc-address:--grpc-port. `fd_limit` is the process's soft descriptor limit: the connection
// cap stays 64 descriptors below it. Logs the limits it sets on `log`. InvalidArgument (whatever
// the cause: a bad flag): the TLS flags do not go together or a PEM file cannot be read or
// parsed; Unavailable: the address cannot be listened on. Each message is the line to log.
absl::StatusOr<GrpcServer> StartGrpcServer(const ServerFlags& flags, rlim_t fd_limit,
                                           InferenceService& service, common::Logger* log);

// From now on gRPC's health service follows `serving` (borrowed; `server` must outlive its
// changes): the overall service ("") is SERVING while ready, "liveness" while live.
void FollowServingState(grpc::Server& server, ServingState& serving);

}  // namespace sluice::server
