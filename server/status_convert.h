#pragma once

// The one place where engine statuses become protocol statuses (STYLE rule 9): gRPC codes, and
// HTTP status codes for the KServe v2 REST front end (server/http/).

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace sluice::server {

// Same canonical code, same message cut to common::kMaxMessageBytes (common::EchoInput).
grpc::Status ToGrpcStatus(const absl::Status& status);

// A request (a body, a message, a tensor) larger than a configured limit: RESOURCE_EXHAUSTED, as
// gRPC itself reports an oversized message, marked (a status payload) so that HTTP answers 413
// Payload Too Large, not 429 Too Many Requests, which says "retry later".
absl::Status PayloadTooLargeError(absl::string_view message);
bool IsPayloadTooLarge(const absl::Status& status);

// The one mapping from a status to an HTTP status, for every route and API (each API writes its
// own error body around it): 400 bad input (and a failed precondition), 404 unknown model or
// version, 413 a request over a size limit (PayloadTooLargeError), 429 queue full, 499 cancelled
// by the client, 503 not ready or draining, 504 expired in the queue, 500 an internal failure;
// 200 for OK.
int ToHttpStatusCode(const absl::Status& status);

}  // namespace sluice::server
