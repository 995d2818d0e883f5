#include "server/status_convert.h"

#include <string>

#include "absl/strings/cord.h"
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

namespace {
// The payload that marks a PayloadTooLargeError (the type URL is the payload's key).
constexpr char kPayloadTooLargeUrl[] = "type.sluice.dev/payload-too-large";
}  // namespace

absl::Status PayloadTooLargeError(absl::string_view message) {
  absl::Status status = absl::ResourceExhaustedError(message);
  status.SetPayload(kPayloadTooLargeUrl, absl::Cord("1"));
  return status;
}

bool IsPayloadTooLarge(const absl::Status& status) {
  return status.code() == absl::StatusCode::kResourceExhausted &&
         status.GetPayload(kPayloadTooLargeUrl).has_value();
}

int ToHttpStatusCode(const absl::Status& status) {
  if (IsPayloadTooLarge(status)) return 413;
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;  // the client went away; nobody reads it (nginx's convention)
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:  // Internal, Unknown, DataLoss
      return 500;
  }
}

}  // namespace sluice::server
