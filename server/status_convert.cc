#include "server/status_convert.h"

#include <string>

#include "common/echo.h"

namespace sluice::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering (google.rpc.Code). The message is bounded:
  // it travels in a header (grpc-message), and one past the client's header limit turned the
  // code into RESOURCE_EXHAUSTED, which clients read as "retry later".
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      common::EchoInput(status.message(), common::kMaxMessageBytes));
}

}  // namespace sluice::server
