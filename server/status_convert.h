#pragma once

// The one place where engine statuses become gRPC statuses (STYLE rule 9).

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace sluice::server {

// Same canonical code, same message cut to common::kMaxMessageBytes (common::EchoInput).
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace sluice::server
