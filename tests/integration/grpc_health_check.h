#pragma once

// The standard gRPC health service, asked the way a load balancer or Kubernetes' grpc probe asks:
// shared by server_integration_test.cc and operator_integration_test.cc.

#include <string>

#include "absl/status/statusor.h"

namespace sluice::testing {

// grpc.health.v1.Health/Check of the overall service ("") at `address`, through the generic stub
// (no health proto compiled here), at most 10 s: the HealthCheckResponse's bytes ("\x08\x01":
// SERVING, "\x08\x02": NOT_SERVING), or the call's error with its gRPC code.
absl::StatusOr<std::string> GrpcHealthCheck(const std::string& address);

}  // namespace sluice::testing
