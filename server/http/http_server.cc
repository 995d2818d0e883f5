#include "server/http/http_server.h"

#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/http/http_session.h"

namespace sluice::server::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using internal::ErrorJson;
using internal::PlainStream;
using internal::Session;
using internal::SessionBase;
using internal::TlsStream;
using std::chrono::milliseconds;

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

void HttpServer::Impl::DrainSessions(bool stopping_now) {
  std::vector<std::shared_ptr<SessionBase>> open;
  {
    common::MutexLock lock(&sessions_mu);
    open.reserve(sessions.size());
    for (auto& [raw, weak] : sessions) {
      if (std::shared_ptr<SessionBase> session = weak.lock()) open.push_back(std::move(session));
    }
  }
  for (const std::shared_ptr<SessionBase>& session : open) session->Drain(stopping_now);
}

HttpServer::HttpServer(HttpServerOptions options, Handler handler)
    : options_(std::move(options)), handler_(std::move(handler)) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options,
                                                              Handler handler) {
  if (options.threads < 1) return absl::InvalidArgumentError("HTTP threads must be >= 1");
  if (options.max_inflight_body_bytes < options.max_body_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the HTTP in-flight body budget (", options.max_inflight_body_bytes,
                     " bytes, --http-max-inflight-bytes) is smaller than the largest body (",
                     options.max_body_bytes, " bytes, ", options.max_body_bytes_flag, ")"));
  }
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(options), std::move(handler)));
  const HttpServerOptions& o = server->options_;
  server->budget_ = std::make_shared<ByteBudget>(o.max_inflight_body_bytes);
  server->impl_ =
      std::make_shared<Impl>(o, server->handler_, server->connections_, server->budget_);
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

uint64_t HttpServer::inflight_body_bytes() const {
  return budget_ != nullptr ? budget_->used_bytes() : 0;
}

void HttpServer::BeginDrain() {
  if (stopped_ || impl_ == nullptr || impl_->draining.exchange(true)) return;
  impl_->DrainSessions(/*stopping=*/false);
}

void HttpServer::Stop(std::chrono::milliseconds grace) {
  if (stopped_ || impl_ == nullptr) return;
  stopped_ = true;
  impl_->draining.store(true);
  impl_->stopping.store(true);
  // No new connections; then every connection waiting for a request is closed, and the others
  // (a request being read, in the handler, being answered, lingering) get `grace` to end.
  // A raw pointer, not the shared_ptr: if ioc.stop() below comes first this handler is never run,
  // and a copy of impl_ inside the io_context that impl_ owns would keep both alive for good (a
  // cycle LeakSanitizer reports at exit). Run, it runs on an I/O thread, joined before impl_ goes.
  asio::post(impl_->accept_strand, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    impl->accept_retry.cancel();
  });
  impl_->DrainSessions(/*stopping=*/true);
  // Polled: this runs once, at exit, and a condition variable in every connection's destructor
  // would cost each connection for it.
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (connections_->load(std::memory_order_relaxed) > 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  {
    common::MutexLock lock(&impl_->liveness->mu);
    impl_->liveness->alive = false;
  }
  impl_->ioc.stop();
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
  beast::error_code ignored;
  impl_->acceptor.close(ignored);  // if the posted close did not run (no I/O thread runs now)
  // Destroys every pending operation, and with them the connections they own (unless a
  // Responder still holds the I/O context: then when the last one goes).
  impl_.reset();
}

}  // namespace sluice::server::http
