#include "server/http/http_server.h"

#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "boost/beast/ssl.hpp"
#include "nlohmann/json.hpp"

namespace sluice::server::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using std::chrono::milliseconds;

using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// Whether Responders may still queue writes. Stop() clears it under the mutex, so a Responder
// that runs concurrently either posts before the I/O context stops or not at all.
struct Liveness {
  absl::Mutex mu;
  bool alive ABSL_GUARDED_BY(mu) = true;
};

std::string ErrorJson(absl::string_view message) {
  return nlohmann::json{{"error", std::string(message)}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

// Shared by the server and by every Responder not yet called or destroyed, so that the I/O
// context (and with it every connection's socket) outlives a connection a late Responder still
// holds, e.g. a load/unload task that finishes after Stop().
struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  Impl(const HttpServerOptions& options, const Handler& handler,
       std::shared_ptr<std::atomic<int64_t>> connections)
      : options(options),
        handler(handler),
        connections(std::move(connections)),
        ioc(options.threads) {}

  void DoAccept();
  void RefuseBusy(tcp::socket socket);

  const HttpServerOptions& options;  // the server's, which outlives this
  const Handler& handler;
  const std::shared_ptr<std::atomic<int64_t>> connections;
  const std::shared_ptr<Liveness> liveness = std::make_shared<Liveness>();
  // Declared before the I/O context: sessions destroyed with it may still hold TLS streams.
  std::optional<asio::ssl::context> ssl;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  asio::steady_timer accept_retry{ioc};
};

namespace {

// One connection: reads a request (idle wait, header, body: each under its own deadline), hands
// it to the handler, writes the answer when the Responder delivers it (posted to this
// connection's strand), then reads the next one if the connection is kept alive. Owned by the
// pending asynchronous operation, or by the Responder while the handler works.
template <typename Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

  Session(HttpServer::Impl& impl, tcp::socket&& socket)
      : impl_(impl), connections_(impl.connections), stream_(MakeStream(impl, std::move(socket))) {
    connections_->fetch_add(1, std::memory_order_relaxed);
  }
  ~Session() { connections_->fetch_sub(1, std::memory_order_relaxed); }

  void Run() {
    auto self = this->shared_from_this();
    if constexpr (kTls) {
      Tcp().expires_after(milliseconds(impl_.options.header_timeout_ms));
      stream_.async_handshake(asio::ssl::stream_base::server, [self](beast::error_code ec) {
        if (!ec) self->ReadRequest();
      });
    } else {
      asio::dispatch(stream_.get_executor(), [self] { self->ReadRequest(); });
    }
  }

 private:
  static Stream MakeStream(HttpServer::Impl& impl, tcp::socket&& socket) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *impl.ssl);
    } else {
      return Stream(std::move(socket));
    }
  }

  beast::tcp_stream& Tcp() { return beast::get_lowest_layer(stream_); }
  bool first_request_ = true;  // no request read yet on this connection (strand only)

  void ReadRequest() {
    parser_.emplace();
    parser_->body_limit(impl_.options.max_body_bytes);
    parser_->header_limit(impl_.options.max_header_bytes);
    if (buffer_.size() > 0) {  // the client already sent (part of) the next request
      ReadHeader();
      return;
    }
    // The first byte of a request: a new connection gets the header timeout (a client that
    // connects and says nothing must not hold a --http-max-connections slot for the idle
    // timeout); between keep-alive requests the idle timeout applies.
    Tcp().expires_after(milliseconds(first_request_ ? impl_.options.header_timeout_ms
                                                    : impl_.options.idle_timeout_ms));
    first_request_ = false;
    auto self = this->shared_from_this();
    stream_.async_read_some(buffer_.prepare(4096), [self](beast::error_code ec, std::size_t bytes) {
      if (ec) return;  // closed, reset or idle too long
      self->buffer_.commit(bytes);
      self->ReadHeader();
    });
  }

  void ReadHeader() {
    Tcp().expires_after(milliseconds(impl_.options.header_timeout_ms));
    auto self = this->shared_from_this();
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self](beast::error_code ec, std::size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) {
      OnReadError(ec);
      return;
    }
    auto self = this->shared_from_this();
    if (beast::iequals(parser_->get()[bhttp::field::expect], "100-continue")) {
      auto proceed =
          std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, 11);
      Tcp().expires_after(milliseconds(impl_.options.write_timeout_ms));
      bhttp::async_write(stream_, *proceed,
                         [self, proceed](beast::error_code write_ec, std::size_t) {
                           if (!write_ec) self->ReadBody();
                         });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    Tcp().expires_after(milliseconds(impl_.options.body_timeout_ms));
    auto self = this->shared_from_this();
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self](beast::error_code ec, std::size_t) { self->OnBody(ec); });
  }

  void OnReadError(beast::error_code ec) {
    if (ec == bhttp::error::body_limit) {
      SendErrorAndClose(413, absl::StrCat("request body over ", impl_.options.max_body_bytes,
                                          " bytes (--max-request-bytes)"));
    } else if (ec == bhttp::error::header_limit) {
      SendErrorAndClose(
          431, absl::StrCat("request header over ", impl_.options.max_header_bytes, " bytes"));
    } else if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
               ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
      SendErrorAndClose(400, absl::StrCat("malformed HTTP request: ", ec.message()));
    }
    // Otherwise (end of stream, reset, a timeout, which closed the socket): nothing to answer.
  }

  void OnBody(beast::error_code ec) {
    if (ec) {
      OnReadError(ec);
      return;
    }
    Tcp().expires_never();  // the engine's time is the request's own (its timeout parameter)
    bhttp::request<bhttp::string_body> message = parser_->release();
    parser_.reset();
    keep_alive_ = message.keep_alive();
    HttpRequest request;
    request.method = std::string(message.method_string());
    const beast::string_view target = message.target();
    const size_t question = target.find('?');
    request.path = std::string(target.substr(0, question));
    if (question != beast::string_view::npos) {
      request.query = std::string(target.substr(question + 1));
    }
    request.content_type = std::string(message[bhttp::field::content_type]);
    if (auto it = message.find("Inference-Header-Content-Length"); it != message.end()) {
      request.inference_header_content_length = std::string(it->value());
    }
    request.body = std::make_shared<std::string>(std::move(message.body()));
    // Members are destroyed in reverse order: the connection before the I/O context it uses.
    struct Hold {
      std::shared_ptr<HttpServer::Impl> impl;
      std::shared_ptr<Session> session;
    };
    auto hold =
        std::make_shared<const Hold>(Hold{impl_.shared_from_this(), this->shared_from_this()});
    Responder responder = [hold](HttpResponse response) {
      Liveness& liveness = *hold->impl->liveness;
      absl::MutexLock lock(&liveness.mu);
      if (!liveness.alive) return;
      asio::post(hold->session->stream_.get_executor(),
                 [session = hold->session, response = std::move(response)]() mutable {
                   session->Write(std::move(response));
                 });
    };
    impl_.handler(std::move(request), std::move(responder));
  }

  void SendErrorAndClose(int status, absl::string_view message) {
    keep_alive_ = false;
    HttpResponse response;
    response.status = status;
    response.body = ErrorJson(message);
    Write(std::move(response));
  }

  void Write(HttpResponse response) {
    auto out = std::make_unique<bhttp::response<bhttp::string_body>>(
        static_cast<bhttp::status>(response.status), 11);
    out->set(bhttp::field::server, "sluice");
    if (!response.content_type.empty()) out->set(bhttp::field::content_type, response.content_type);
    for (auto& [name, value] : response.headers) out->set(name, value);
    out->body() = std::move(response.body);
    out->keep_alive(keep_alive_);
    out->prepare_payload();
    response_ = std::move(out);
    Tcp().expires_after(milliseconds(impl_.options.write_timeout_ms));
    auto self = this->shared_from_this();
    bhttp::async_write(stream_, *response_,
                       [self](beast::error_code ec, std::size_t) { self->OnWrite(ec); });
  }

  void OnWrite(beast::error_code ec) {
    response_.reset();
    if (ec) return;
    if (!keep_alive_) {
      Close();
      return;
    }
    ReadRequest();
  }

  void Close() {
    if constexpr (kTls) {
      Tcp().expires_after(std::chrono::seconds(1));
      auto self = this->shared_from_this();
      stream_.async_shutdown([self](beast::error_code) { self->Tcp().close(); });
    } else {
      beast::error_code ignored;
      Tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
    }
  }

  HttpServer::Impl& impl_;
  const std::shared_ptr<std::atomic<int64_t>> connections_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::unique_ptr<bhttp::response<bhttp::string_body>> response_;
  bool keep_alive_ = true;
};

}  // namespace

void HttpServer::Impl::DoAccept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;  // stopping
    if (ec) {
      // Out of file descriptors or similar: try again a little later rather than spin.
      accept_retry.expires_after(milliseconds(50));
      accept_retry.async_wait([this](beast::error_code wait_ec) {
        if (!wait_ec) DoAccept();
      });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    if (connections->load(std::memory_order_relaxed) >= options.max_connections) {
      RefuseBusy(std::move(socket));
    } else if (ssl.has_value()) {
      std::make_shared<Session<TlsStream>>(*this, std::move(socket))->Run();
    } else {
      std::make_shared<Session<PlainStream>>(*this, std::move(socket))->Run();
    }
    DoAccept();
  });
}

void HttpServer::Impl::RefuseBusy(tcp::socket socket) {
  auto owned = std::make_shared<tcp::socket>(std::move(socket));
  if (ssl.has_value()) return;  // a plaintext answer means nothing to a TLS client: just close
  static const std::string kBusy = [] {
    const std::string body = ErrorJson("too many connections (--http-max-connections)");
    return absl::StrCat(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: ",
        body.size(), "\r\nConnection: close\r\n\r\n", body);
  }();
  asio::async_write(*owned, asio::buffer(kBusy), [owned](beast::error_code, std::size_t) {
    beast::error_code ignored;
    owned->shutdown(tcp::socket::shutdown_send, ignored);
  });
}

HttpServer::HttpServer(HttpServerOptions options, Handler handler)
    : options_(std::move(options)), handler_(std::move(handler)) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options,
                                                              Handler handler) {
  if (options.threads < 1) return absl::InvalidArgumentError("HTTP threads must be >= 1");
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(options), std::move(handler)));
  const HttpServerOptions& o = server->options_;
  server->impl_ = std::make_shared<Impl>(o, server->handler_, server->connections_);
  Impl& impl = *server->impl_;
  beast::error_code ec;
  if (!o.tls_cert_pem.empty() || !o.tls_key_pem.empty()) {
    impl.ssl.emplace(asio::ssl::context::tls_server);
    asio::ssl::context& ctx = *impl.ssl;
    ctx.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                        asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                        asio::ssl::context::no_tlsv1_1,
                    ec);
    ctx.use_certificate_chain(asio::buffer(o.tls_cert_pem), ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("HTTP TLS certificate: ", ec.message()));
    ctx.use_private_key(asio::buffer(o.tls_key_pem), asio::ssl::context::pem, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("HTTP TLS key: ", ec.message()));
    if (!o.tls_ca_pem.empty()) {
      ctx.add_certificate_authority(asio::buffer(o.tls_ca_pem), ec);
      if (ec) return absl::InvalidArgumentError(absl::StrCat("HTTP TLS CA: ", ec.message()));
      ctx.set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert, ec);
    }
  }
  const asio::ip::address address = asio::ip::make_address(o.address, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP address '", o.address, "' is not an IP address: ", ec.message()));
  }
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(o.port));
  impl.acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl.acceptor.bind(endpoint, ec);
  if (!ec) impl.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", o.address, ":", o.port, ": ", ec.message()));
  }
  server->port_ = impl.acceptor.local_endpoint().port();
  impl.DoAccept();
  for (int i = 0; i < o.threads; ++i) {
    server->threads_.emplace_back([&impl] {
      // A handler that throws (std::bad_alloc reserving a large body, an OpenSSL failure making
      // a TLS stream) must not end the process: the throwing connection is dropped (its
      // handlers are gone) and the thread goes back to serving the others.
      for (;;) {
        try {
          impl.ioc.run();
          return;
        } catch (const std::exception& e) {
          std::fprintf(stderr,
                       "sluice-server: an HTTP I/O handler threw (%s); connection dropped\n",
                       e.what());
        }
      }
    });
  }
  return server;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (stopped_ || impl_ == nullptr) return;
  stopped_ = true;
  {
    absl::MutexLock lock(&impl_->liveness->mu);
    impl_->liveness->alive = false;
  }
  impl_->ioc.stop();
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
  // Destroys every pending operation, and with them the connections they own (unless a
  // Responder still holds the I/O context: then when the last one goes).
  impl_.reset();
}

}  // namespace sluice::server::http
