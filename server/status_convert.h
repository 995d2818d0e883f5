#pragma once

// The one place where engine statuses become protocol statuses (STYLE rule 9): gRPC codes, and
// HTTP status codes for the KServe v2 REST front end (server/http/).

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace sluice::server {

// Same canonical code, same message cut to common::kMaxMessageBytes (common::EchoInput).
grpc::Status ToGrpcStatus(const absl::Status& status);

// The HTTP status of a non-OK engine status: 400 bad input (and a failed precondition), 404 unknown
// model or version, 503 not ready or draining, 429 queue full, 504 expired in the queue, 500 an
// internal failure; 200 for OK.
int ToHttpStatusCode(absl::StatusCode code);

}  // namespace sluice::server
