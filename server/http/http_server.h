#pragma once

// HttpServer: an HTTP/1.1 server (Boost.Beast on Asio) that holds no thread per connection: a
// small fixed pool of I/O threads runs every connection's reads and writes as asynchronous
// operations. A request is read in full (header and body, each under its own timeout and size
// limit) and handed to the Handler, which may answer at once or later from any thread (for an
// inference: the engine's completion thread); the connection reads nothing more until then.
//
// The transport's own refusals are answered here, without the handler: a body over
// max_body_bytes (413), a body the shared in-flight budget cannot hold (503), a malformed request
// line, header or chunked encoding (400), and a connection beyond max_connections (503, then
// closed). A client that stays silent or trickles bytes is cut off by the timeouts. A refusal
// that leaves the client's body unread reads and discards what keeps coming (bounded in bytes and
// time) before closing: closing a socket with unread bytes sends a TCP reset, and a reset that
// reaches the client before it has read the answer destroys the answer in its receive buffer.
//
// While the handler works on a POST (an inference), the connection watches its socket: a client
// that closes it or resets it is reported through HttpRequest::client_gone, which the routes hand
// to the engine as the request's cancellation flag (as gRPC's OnCancel does).

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice::server::http {

class ByteBudget;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target without its query string (not percent-decoded)
  std::string query;   // after '?', or empty
  std::string content_type;
  // The Inference-Header-Content-Length header (Triton's binary tensor extension), verbatim;
  // nullopt if absent.
  std::optional<std::string> inference_header_content_length;
  // Shared so that the engine request can keep the body alive while it borrows input bytes. Its
  // bytes count against the in-flight budget until the last owner lets it go.
  std::shared_ptr<std::string> body;
  // Set (from an I/O thread) when the client closes or resets the connection before its answer is
  // written; POST requests only. Never null.
  std::shared_ptr<std::atomic<bool>> client_gone = std::make_shared<std::atomic<bool>>(false);
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";  // empty: no Content-Type (no body)
  std::string body;
  // Extra header fields (e.g. Inference-Header-Content-Length).
  std::vector<std::pair<std::string, std::string>> headers;
};

// Delivers the answer to a request. Call exactly once, from any thread; it only queues the write
// on the connection's I/O strand. Dropping it unanswered closes the connection.
using Responder = std::function<void(HttpResponse)>;
// Called on an I/O thread for every complete request; must not block.
using Handler = std::function<void(HttpRequest&&, Responder)>;

struct HttpServerOptions {
  // Address to bind, and port (0 picks a free one: port() tells which).
  std::string address = "0.0.0.0";
  int port = 8000;
  // I/O threads. Each runs many connections; two keep one busy writer from delaying reads.
  int threads = 2;
  // Connections open at once; a connection beyond it is answered 503 and closed.
  int max_connections = 1024;
  // Largest request body; a larger Content-Length is answered 413 before the body is read (a
  // chunked body when it passes the limit).
  uint64_t max_body_bytes = 64 << 20;
  // The flag the 413 message names as the limit (the process sets whichever bound it).
  std::string max_body_bytes_flag = "--http-max-body-bytes";
  // Request bodies held at once by all connections together: from the header (Content-Length is
  // charged in full before a byte of the body is read or reserved; a chunked body as it grows)
  // until the last owner of the body (the engine request) lets it go. A request that does not fit
  // is answered 503 (with Retry-After) before its body is read. Must be >= max_body_bytes.
  uint64_t max_inflight_body_bytes = uint64_t{1} << 30;
  // After a refusal that leaves a body unread, and after the last answer on a connection: at most
  // this many bytes, for at most this long, are read and dropped while waiting for the client to
  // close (so that the answer is not lost to a reset; see above).
  uint64_t linger_max_bytes = 16 << 20;
  int linger_timeout_ms = 2000;
  // Largest request line plus header fields.
  uint32_t max_header_bytes = 16 << 10;
  // A keep-alive connection may wait this long between requests before the server closes it.
  int idle_timeout_ms = 60000;
  // From a request's first byte to the end of its header; a client that trickles is cut off.
  int header_timeout_ms = 10000;
  // From the end of the header to the end of the body.
  int body_timeout_ms = 60000;
  // Writing one response (a client that stops reading is cut off).
  int write_timeout_ms = 60000;
  // The body of the transport's own refusals (413, 503, 400 above), in the shape of the API that
  // owns `target` (the request's target, empty if its request line was never read): the route
  // table's RouteTable::ErrorBody. Empty: KServe's {"error": "..."}.
  std::function<std::string(absl::string_view target, int status, absl::string_view message)>
      error_body;
  // PEM strings. With a certificate and key, the port speaks TLS only; with a CA as well, clients
  // must present a certificate it signed (mutual TLS).
  std::string tls_cert_pem;
  std::string tls_key_pem;
  std::string tls_ca_pem;
};

// Thread-safe. The handler runs on the I/O threads.
class HttpServer {
 public:
  // Binds and starts the I/O threads. Error if the address cannot be bound or TLS material is
  // unusable.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options,
                                                           Handler handler);
  // Stop()s.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  bool tls() const { return !options_.tls_cert_pem.empty(); }
  // Connections open now.
  int64_t connections() const { return connections_->load(std::memory_order_relaxed); }

  // Request bodies held now (the in-flight budget's use).
  uint64_t inflight_body_bytes() const;

  // The process is shutting down: from now on every answer carries `Connection: close`, and
  // keep-alive connections waiting for their next request are closed (clients reconnect, to
  // another replica). New connections are still accepted (readiness probes get their "not
  // ready"). Idempotent; Stop() implies it.
  void BeginDrain();

  // Stops accepting and closes every connection that is waiting for a request; connections with a
  // request being read, in the handler or being answered get up to `grace` to finish (answers
  // posted by Responders before the I/O threads stop are written, with `Connection: close`); then
  // the I/O threads stop and are joined, and what is left is dropped. A Responder called afterwards
  // does nothing; one destroyed afterwards closes its connection then. Idempotent.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(0));

  // The Asio/Beast machinery (http_session.h, http_server.cc); public only so that those files'
  // helpers can name it.
  struct Impl;

 private:
  HttpServer(HttpServerOptions options, Handler handler);

  const HttpServerOptions options_;
  const Handler handler_;
  std::shared_ptr<std::atomic<int64_t>> connections_ = std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<ByteBudget> budget_;
  int port_ = 0;
  std::shared_ptr<Impl> impl_;
  std::vector<std::thread> threads_;
  bool stopped_ = false;
};

}  // namespace sluice::server::http
