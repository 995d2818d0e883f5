#pragma once

// HttpConnection: one blocking HTTP/1.1 keep-alive connection over a plain TCP socket, enough for
// the KServe v2 REST protocol: requests with a body, answers with a Content-Length (or ended by
// the server closing). Used by sluice-loadtest --protocol http (one connection per sending
// thread) and by the HTTP integration tests, which also use SendRaw() to put malformed bytes on
// the wire. No TLS (the tests use curl for that).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice::client {

struct HttpReply {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // The value of header `name` (case-insensitive), or "" if absent.
  std::string Header(absl::string_view name) const;
};

// Not thread-safe: one thread uses a connection at a time.
class HttpConnection {
 public:
  // Connects to `host` (an IPv4/IPv6 literal or a name) and `port`; `timeout_ms` bounds the
  // connect and every later send or receive.
  static absl::StatusOr<std::unique_ptr<HttpConnection>> Connect(const std::string& host, int port,
                                                                 int timeout_ms = 10000);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Sends `method target` with `body` and `headers` (Host and Content-Length are added) and reads
  // the answer. Unavailable if the connection is (or gets) closed.
  absl::StatusOr<HttpReply> Request(
      absl::string_view method, absl::string_view target, absl::string_view body = "",
      const std::vector<std::pair<std::string, std::string>>& headers = {});

  // Writes `bytes` as they are.
  absl::Status SendRaw(absl::string_view bytes);
  // Reads one answer.
  absl::StatusOr<HttpReply> ReadReply();
  // True once the server has closed the connection (a read returned end of stream) or it failed.
  bool closed() const { return closed_; }
  // Waits up to `timeout_ms` for the server to close the connection; true if it did.
  bool WaitForClose(int timeout_ms);

 private:
  explicit HttpConnection(int fd, std::string host) : fd_(fd), host_(std::move(host)) {}
  // Reads more bytes into buffer_; false at end of stream or on error.
  bool Fill();

  int fd_;
  std::string host_;
  std::string buffer_;  // received, not yet consumed
  bool closed_ = false;
};

// Splits "host:port" (or "[v6]:port"); InvalidArgument if there is no valid port.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(absl::string_view address);

}  // namespace sluice::client
