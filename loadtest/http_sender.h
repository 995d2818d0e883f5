#pragma once

// sluice-loadtest --protocol http: the KServe v2 HTTP/REST form of a load-test request, and a
// blocking sender that keeps one keep-alive connection (one per closed-loop thread).
//
// The body is built once from the gRPC request that request_builder.h makes (so both protocols
// send the same tensors): binary (Triton's binary tensor extension both ways, what perf_analyzer
// -i http sends by default) or JSON (`data` arrays, shortest round-trip numbers; JSON outputs).

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "client/http_connection.h"
#include "proto/grpc_service.pb.h"

namespace sluice::loadtest {

struct HttpInferBody {
  std::string target;  // "/v2/models/<m>[/versions/<v>]/infer"
  std::string body;
  // The Inference-Header-Content-Length of a binary body; nullopt for JSON.
  std::optional<size_t> header_length;
};

// InvalidArgument if `request` has typed contents (the builder makes raw ones) or a datatype that
// has no JSON form here.
absl::StatusOr<HttpInferBody> BuildHttpInferBody(const inference::ModelInferRequest& request,
                                                 bool json);

// The canonical code for an HTTP status, as the server maps them (server/status_convert.h).
absl::StatusCode StatusCodeFromHttp(int status);

// Not thread-safe: one per sending thread.
class HttpSender {
 public:
  HttpSender(std::string host, int port, std::shared_ptr<const HttpInferBody> body, int timeout_ms);
  // Sends the request once and reads the answer; reconnects if the connection was closed.
  // OK for a 200 whose outputs arrived; otherwise the error the answer carries.
  absl::Status Send();

 private:
  const std::string host_;
  const int port_;
  const std::shared_ptr<const HttpInferBody> body_;
  const int timeout_ms_;
  std::unique_ptr<client::HttpConnection> connection_;
};

}  // namespace sluice::loadtest
