#include "client/status_convert.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/status.h"

namespace sluice::client {

absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view rpc,
                            absl::string_view target) {
  if (status.ok()) return absl::OkStatus();
  // gRPC's codes 0..16 are the canonical codes that absl::StatusCode also numbers 0..16; anything
  // else would be a broken peer, which absl::Status itself maps to UNKNOWN.
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  if (code == absl::StatusCode::kUnavailable) {
    // Either the server could not be reached (gRPC's message then names the cause, not always the
    // address) or the server itself answered UNAVAILABLE (draining, model not ready): say where.
    return absl::UnavailableError(absl::StrCat(rpc, " to ", target, ": ", status.error_message()));
  }
  if (status.error_message().empty()) {
    // E.g. the default UNIMPLEMENTED of a generated service: say at least what failed and how.
    return absl::Status(code, absl::StrCat(rpc, ": ", absl::StatusCodeToString(code),
                                           " (no message from the server)"));
  }
  return absl::Status(code, status.error_message());
}

}  // namespace sluice::client
