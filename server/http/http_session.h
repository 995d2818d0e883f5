#pragma once

// The connection half of http_server.cc, included by it alone: HttpServer::Impl (the Asio
// machinery shared by the server and its Responders) and Session<Stream>, one connection over
// plain TCP or TLS. Session reads in parts: reading a request, decoding its body, handing it to
// the handler (and watching for a client that leaves meanwhile), answering, and closing (the
// linger that keeps a reset from overtaking the last answer).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/asio.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "boost/beast/ssl.hpp"
#include "common/mutex.h"
#include "nlohmann/json.hpp"
#include "server/http/byte_budget.h"
#include "server/http/content_coding.h"
#include "server/http/http_server.h"
#include "server/status_convert.h"

// Names for http_server.cc and this file only.
namespace sluice::server::http::internal {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using std::chrono::milliseconds;

inline absl::string_view AsAbsl(beast::string_view view) { return {view.data(), view.size()}; }

// Answers larger than this go uncompressed whatever Accept-Encoding asked (see Session::Write).
inline constexpr size_t kMaxCompressedResponseBytes = 64 << 20;

using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// Whether Responders may still queue writes. Stop() clears it under the mutex, so a Responder
// that runs concurrently either posts before the I/O context stops or not at all.
struct Liveness {
  common::Mutex mu;
  bool alive ABSL_GUARDED_BY(mu) = true;
};

inline std::string ErrorJson(absl::string_view message) {
  return nlohmann::json{{"error", std::string(message)}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// What the drain needs of a connection, whatever its stream type.
class SessionBase {
 public:
  virtual ~SessionBase() = default;
  // Posted to the connection's strand by BeginDrain() (`stopping` false) and Stop() (true).
  virtual void Drain(bool stopping) = 0;
};

}  // namespace sluice::server::http::internal

namespace sluice::server::http {

// Shared by the server and by every Responder not yet called or destroyed, so that the I/O
// context (and with it every connection's socket) outlives a connection a late Responder still
// holds, e.g. a load/unload task that finishes after Stop().
struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  Impl(const HttpServerOptions& options, const Handler& handler,
       std::shared_ptr<std::atomic<int64_t>> connections, std::shared_ptr<ByteBudget> budget)
      : options(options),
        handler(handler),
        connections(std::move(connections)),
        budget(std::move(budget)),
        ioc(options.threads) {}

  void DoAccept();
  void RefuseBusy(boost::asio::ip::tcp::socket socket);
  // Calls Drain(stopping) on every open connection, on its strand.
  void DrainSessions(bool stopping);

  void Register(internal::SessionBase* session, std::weak_ptr<internal::SessionBase> weak) {
    common::MutexLock lock(&sessions_mu);
    sessions.emplace(session, std::move(weak));
  }
  void Unregister(internal::SessionBase* session) {
    common::MutexLock lock(&sessions_mu);
    sessions.erase(session);
  }

  const HttpServerOptions& options;  // the server's, which outlives this
  const Handler& handler;
  const std::shared_ptr<std::atomic<int64_t>> connections;
  const std::shared_ptr<ByteBudget> budget;
  const std::shared_ptr<internal::Liveness> liveness = std::make_shared<internal::Liveness>();
  // Set by BeginDrain(): answers carry Connection: close, idle connections are closed.
  std::atomic<bool> draining{false};
  // Set by Stop(): a connection waiting for its first request is closed too.
  std::atomic<bool> stopping{false};
  common::Mutex sessions_mu;
  std::unordered_map<internal::SessionBase*, std::weak_ptr<internal::SessionBase>> sessions
      ABSL_GUARDED_BY(sessions_mu);
  // Declared before the I/O context: sessions destroyed with it may still hold TLS streams.
  std::optional<boost::asio::ssl::context> ssl;
  boost::asio::io_context ioc;
  // The acceptor's operations and its close (from Stop()) run on this strand.
  boost::asio::strand<boost::asio::io_context::executor_type> accept_strand =
      boost::asio::make_strand(ioc);
  boost::asio::ip::tcp::acceptor acceptor{accept_strand};
  boost::asio::steady_timer accept_retry{accept_strand};
};

}  // namespace sluice::server::http

namespace sluice::server::http::internal {

// One connection: reads a request (idle wait, header, body: each under its own deadline), hands
// it to the handler, writes the answer when the Responder delivers it (posted to this
// connection's strand), then reads the next one if the connection is kept alive. Owned by the
// pending asynchronous operations, or by the Responder while the handler works.
template <typename Stream>
class Session : public SessionBase, public std::enable_shared_from_this<Session<Stream>> {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

  Session(HttpServer::Impl& impl, tcp::socket&& socket)
      : impl_(impl), connections_(impl.connections), stream_(MakeStream(impl, std::move(socket))) {
    connections_->fetch_add(1, std::memory_order_relaxed);
  }
  ~Session() override {
    impl_.Unregister(this);
    ReleaseCharge();
    connections_->fetch_sub(1, std::memory_order_relaxed);
  }

  void Run() {
    auto self = this->shared_from_this();
    impl_.Register(this, self);
    if constexpr (kTls) {
      Tcp().expires_after(milliseconds(impl_.options.header_timeout_ms));
      stream_.async_handshake(asio::ssl::stream_base::server, [self](beast::error_code ec) {
        if (!ec) self->ReadRequest();
      });
    } else {
      asio::dispatch(stream_.get_executor(), [self] { self->ReadRequest(); });
    }
  }

  void Drain(bool stopping) override {
    auto self = this->shared_from_this();
    asio::post(stream_.get_executor(), [self, stopping] {
      // A keep-alive connection waiting for its next request is closed; a new one waiting for its
      // first is left its one request until Stop() (readiness probes during the drain). At Stop()
      // a request still being read is dropped too: the engine is gone, and a client that
      // trickles must not hold the exit for the rest of the exit timeout.
      const bool idle = self->phase_ == Phase::kIdle;
      if ((idle && (stopping || !self->first_request_pending_)) ||
          (stopping && self->phase_ == Phase::kReading)) {
        self->phase_ = Phase::kClosed;
        self->Tcp().close();
      }
    });
  }

 private:
  // Where the connection is; read and written on its strand only.
  enum class Phase {
    kIdle,       // waiting for the first byte of a request
    kReading,    // reading a request's header or body
    kInHandler,  // the handler has the request; its answer is not written yet
    kWriting,    // writing an answer
    kLingering,  // answered and closing: reading (and dropping) until the client closes
    kClosed,
  };

  static Stream MakeStream(HttpServer::Impl& impl, tcp::socket&& socket) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *impl.ssl);
    } else {
      return Stream(std::move(socket));
    }
  }

  beast::tcp_stream& Tcp() { return beast::get_lowest_layer(stream_); }

  // Reading a request: the idle wait, the header and the body, each under its own deadline.

  void ReadRequest() {
    // A drain closes keep-alive connections instead of waiting for their next request; Stop()
    // closes new ones too.
    if (impl_.stopping.load() || (impl_.draining.load() && !first_request_pending_)) {
      Close();
      return;
    }
    parser_.emplace();
    parser_->body_limit(impl_.options.max_body_bytes);
    parser_->header_limit(impl_.options.max_header_bytes);
    if (buffer_.size() > 0) {  // the client already sent (part of) the next request
      phase_ = Phase::kReading;
      ReadHeader();
      return;
    }
    phase_ = Phase::kIdle;
    // The first byte of a request: a new connection gets the header timeout (a client that
    // connects and says nothing must not hold a --http-max-connections slot for the idle
    // timeout); between keep-alive requests the idle timeout applies.
    Tcp().expires_after(milliseconds(first_request_pending_ ? impl_.options.header_timeout_ms
                                                            : impl_.options.idle_timeout_ms));
    auto self = this->shared_from_this();
    stream_.async_read_some(buffer_.prepare(4096), [self](beast::error_code ec, std::size_t bytes) {
      if (ec) return;  // closed, reset, idle too long, or closed by the drain
      self->phase_ = Phase::kReading;
      self->buffer_.commit(bytes);
      self->ReadHeader();
    });
  }

  void ReadHeader() {
    first_request_pending_ = false;
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
    // The body is charged to the shared budget before a byte of it is read: Beast reserves a
    // Content-Length body in full when it starts reading it. A chunked body is charged as it
    // grows (ReadBody).
    if (const boost::optional<uint64_t> length = parser_->content_length();
        length.has_value() && *length > 0) {
      if (!impl_.budget->TryAcquire(*length)) {
        RefuseOverBudget(*length);
        return;
      }
      charged_ = *length;
    }
    auto self = this->shared_from_this();
    if (beast::iequals(parser_->get()[bhttp::field::expect], "100-continue")) {
      auto proceed =
          std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, 11);
      Tcp().expires_after(milliseconds(impl_.options.write_timeout_ms));
      bhttp::async_write(stream_, *proceed,
                         [self, proceed](beast::error_code write_ec, std::size_t) {
                           if (!write_ec) self->StartBody();
                         });
      return;
    }
    StartBody();
  }

  void StartBody() {
    if (parser_->is_done()) {  // no body, or all of it came with the header
      OnBody();
      return;
    }
    Tcp().expires_after(milliseconds(impl_.options.body_timeout_ms));
    parser_->eager(true);  // as http::async_read: parse all the buffer holds
    ReadBody();
  }

  void ReadBody() {
    auto self = this->shared_from_this();
    bhttp::async_read_some(stream_, buffer_, *parser_,
                           [self](beast::error_code ec, std::size_t) { self->OnBodyPart(ec); });
  }

  void OnBodyPart(beast::error_code ec) {
    if (ec) {
      OnReadError(ec);
      return;
    }
    if (parser_->chunked()) {
      // What the body's string holds now, charged as it grows.
      const uint64_t held = parser_->get().body().capacity();
      if (held > charged_) {
        if (!impl_.budget->TryAcquire(held - charged_)) {
          RefuseOverBudget(held);
          return;
        }
        charged_ = held;
      }
    }
    if (!parser_->is_done()) {
      ReadBody();
      return;
    }
    OnBody();
  }

  void OnReadError(beast::error_code ec) {
    if (ec == bhttp::error::body_limit) {
      SendErrorAndClose(413, absl::StrCat("request body over ", impl_.options.max_body_bytes,
                                          " bytes (", impl_.options.max_body_bytes_flag, ")"));
    } else if (ec == bhttp::error::header_limit) {
      SendErrorAndClose(
          431, absl::StrCat("request header over ", impl_.options.max_header_bytes, " bytes"));
    } else if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
               ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
      SendErrorAndClose(400, absl::StrCat("malformed HTTP request: ", ec.message()));
    }
    // Otherwise (end of stream, reset, a timeout, which closed the socket): nothing to answer.
  }

  // The body's content coding: gzip and deflate are inflated on the I/O thread.

  // A body sent with Content-Encoding gzip or deflate is inflated here, on the I/O thread, as
  // JSON is parsed there: bounded by --http-max-body-bytes like a plain body, and charged to the
  // in-flight budget step by step before the inflated bytes are taken (the compressed bytes'
  // charge is given back once they are gone). False: answered with an error (the body was read in
  // full, so the connection stays usable).
  bool DecodeBody() {
    auto& message = parser_->get();
    absl::StatusOr<ContentCoding> coding =
        ParseContentEncoding(AsAbsl(message[bhttp::field::content_encoding]));
    if (!coding.ok()) {
      AnswerDecodeError(415, coding.status().message());
      return false;
    }
    if (*coding == ContentCoding::kIdentity) return true;
    uint64_t reserved = 0;
    ByteBudget& budget = *impl_.budget;
    absl::StatusOr<std::string> inflated = Inflate(
        message.body(), *coding, impl_.options.max_body_bytes, impl_.options.max_body_bytes_flag,
        [&budget](uint64_t bytes) { return budget.TryAcquire(bytes); }, &reserved);
    ReleaseCharge();  // the compressed bytes' charge; the inflated ones hold `reserved`
    charged_ = reserved;
    if (!inflated.ok()) {
      ReleaseCharge();
      AnswerDecodeError(ToHttpStatusCode(inflated.status()), inflated.status().message());
      return false;
    }
    message.body() = std::move(*inflated);
    message.erase(bhttp::field::content_encoding);
    return true;
  }

  void AnswerDecodeError(int status, absl::string_view message) {
    HttpResponse response;
    response.status = status;
    if (status == 503) response.headers.emplace_back("Retry-After", "1");
    response.body = ErrorBodyForTarget(status, message);
    keep_alive_ = parser_->get().keep_alive();
    parser_.reset();
    phase_ = Phase::kInHandler;
    Write(std::move(response));
  }

  // Handing the request to the handler, and watching for a client that leaves meanwhile.

  void OnBody() {
    Tcp().expires_never();  // the engine's time is the request's own (its timeout parameter)
    response_coding_ = ChooseResponseCoding(AsAbsl(parser_->get()[bhttp::field::accept_encoding]));
    if (!DecodeBody()) return;
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
    // The body's bytes stay charged until its last owner (the engine request) lets it go.
    const uint64_t charged = std::exchange(charged_, 0);
    if (charged == 0) {
      request.body = std::make_shared<std::string>(std::move(message.body()));
    } else {
      request.body =
          std::shared_ptr<std::string>(new std::string(std::move(message.body())),
                                       [budget = impl_.budget, charged](std::string* body) {
                                         delete body;
                                         budget->Release(charged);
                                       });
    }
    client_gone_ = request.client_gone;
    phase_ = Phase::kInHandler;
    if (message.method() == bhttp::verb::post) WatchForDisconnect();
    // Members are destroyed in reverse order: the connection before the I/O context it uses.
    struct Hold {
      std::shared_ptr<HttpServer::Impl> impl;
      std::shared_ptr<Session> session;
    };
    auto hold =
        std::make_shared<const Hold>(Hold{impl_.shared_from_this(), this->shared_from_this()});
    Responder responder = [hold](HttpResponse response) {
      Liveness& liveness = *hold->impl->liveness;
      common::MutexLock lock(&liveness.mu);
      if (!liveness.alive) return;
      asio::post(hold->session->stream_.get_executor(),
                 [session = hold->session, response = std::move(response)]() mutable {
                   session->Write(std::move(response));
                 });
    };
    impl_.handler(std::move(request), std::move(responder));
  }

  // While the handler has the request, waits for the socket to become readable: end of stream or
  // a reset means the client is gone (client_gone_ is set and the socket closed, so the engine's
  // answer finds nothing to write to); bytes mean it sent its next request early (pipelining),
  // which is left for later, and the watch ends. The bytes are peeked, not read, so the watch
  // never competes with the request reads.
  void WatchForDisconnect() {
    watching_ = true;
    auto self = this->shared_from_this();
    Tcp().socket().async_wait(tcp::socket::wait_read,
                              [self, watch = watch_generation_](beast::error_code ec) {
                                if (watch == self->watch_generation_) self->OnReadable(ec);
                              });
  }

  void OnReadable(beast::error_code ec) {
    if (phase_ != Phase::kInHandler || ec == asio::error::operation_aborted) {
      watching_ = false;  // answered meanwhile
      return;
    }
    if (!ec) {
      char byte = 0;
      beast::error_code peek_ec;
      tcp::socket& socket = Tcp().socket();
      socket.non_blocking(true, peek_ec);
      const size_t peeked =
          peek_ec ? 0 : socket.receive(asio::buffer(&byte, 1), tcp::socket::message_peek, peek_ec);
      if (!peek_ec && peeked > 0) {
        watching_ = false;  // pipelined bytes: not a disconnect
        return;
      }
      if (peek_ec == asio::error::would_block || peek_ec == asio::error::try_again) {
        WatchForDisconnect();  // a spurious wake-up
        return;
      }
      // peeked == 0 with no error, or asio's eof: the client closed its side.
    }
    watching_ = false;
    client_gone_->store(true, std::memory_order_relaxed);
    phase_ = Phase::kClosed;
    Tcp().close();
  }

  // Answering: the transport's own refusals and the handler's answers.

  // The error body in the shape of the API the request was for (HttpServerOptions::error_body:
  // the route table knows which API owns a path; the transport knows none). The target is empty
  // when the request line was never read.
  std::string ErrorBodyForTarget(int status, absl::string_view message) const {
    // The target is set as soon as the request line is parsed, before the fields: a 413 from
    // Content-Length (body_limit) comes before is_header_done().
    const absl::string_view target =
        parser_.has_value() ? AsAbsl(parser_->get().target()) : absl::string_view();
    if (impl_.options.error_body) return impl_.options.error_body(target, status, message);
    return ErrorJson(message);
  }

  void SendErrorAndClose(int status, absl::string_view message) {
    keep_alive_ = false;
    const std::string body = ErrorBodyForTarget(status, message);
    parser_.reset();
    ReleaseCharge();
    HttpResponse response;
    response.status = status;
    response.body = body;
    Write(std::move(response));
  }

  // 503, not 429: the server as a whole is out of room for bodies, not this client over a rate
  // of its own; a proxy or load balancer retries a 503 on another replica (Envoy's `5xx`,
  // nginx's `proxy_next_upstream http_503`), and Retry-After tells a direct client when to.
  void RefuseOverBudget(uint64_t bytes) {
    const ByteBudget& budget = *impl_.budget;
    HttpResponse response;
    response.status = 503;
    response.headers.emplace_back("Retry-After", "1");
    response.body = ErrorBodyForTarget(
        503,
        absl::StrCat("server busy: a request body of ", bytes, " bytes does not fit in the ",
                     budget.limit_bytes() - std::min(budget.used_bytes(), budget.limit_bytes()),
                     " bytes left of the in-flight body budget (", budget.limit_bytes(),
                     " bytes, --http-max-inflight-bytes); retry later"));
    keep_alive_ = false;
    parser_.reset();
    ReleaseCharge();
    Write(std::move(response));
  }

  void Write(HttpResponse response) {
    if (phase_ == Phase::kClosed) return;  // the client went away (or the drain closed it)
    if (watching_) {
      beast::error_code ignored;
      Tcp().socket().cancel(ignored);  // ends the disconnect watch; nothing else is pending
      watching_ = false;
    }
    ++watch_generation_;  // a watch handler still queued belongs to this request, not the next
    if (impl_.draining.load()) keep_alive_ = false;
    phase_ = Phase::kWriting;
    auto out = std::make_unique<bhttp::response<bhttp::string_body>>(
        static_cast<bhttp::status>(response.status), 11);
    out->set(bhttp::field::server, "sluice");
    if (!response.content_type.empty()) out->set(bhttp::field::content_type, response.content_type);
    for (auto& [name, value] : response.headers) out->set(name, value);
    // The answer in the coding the request's Accept-Encoding asked for; bodies past
    // kMaxCompressedResponseBytes go uncompressed (HTTP allows identity whatever was asked), so
    // that one answer cannot hold an I/O thread for long.
    if (const ContentCoding coding = std::exchange(response_coding_, ContentCoding::kIdentity);
        coding != ContentCoding::kIdentity && !response.body.empty() &&
        response.body.size() <= kMaxCompressedResponseBytes) {
      if (absl::StatusOr<std::string> coded = Deflate(response.body, coding); coded.ok()) {
        response.body = std::move(*coded);
        out->set(bhttp::field::content_encoding, std::string(ContentCodingName(coding)));
        out->set(bhttp::field::vary, "Accept-Encoding");
      }
    }
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
    if (ec) {
      phase_ = Phase::kClosed;
      return;
    }
    if (!keep_alive_) {
      Close();
      return;
    }
    ReadRequest();
  }

  // Closing, and the in-flight budget's charge.

  // Ends the connection after its last answer, lingering: reads and drops what the client still
  // sends (a body the refusal left unread) until it closes, at most linger_max_bytes for at most
  // linger_timeout_ms; only then is the socket closed, so that no reset overtakes the answer.
  // Plain TCP shuts down its sending side first (the client sees the end of the answer). TLS
  // reads through the stream (the bytes are records to decrypt and drop) and answers the client's
  // close_notify with its own; a client that just goes is closed after it.
  void Close() {
    phase_ = Phase::kLingering;
    if constexpr (!kTls) {
      beast::error_code ignored;
      Tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
    }
    linger_deadline_ =
        std::chrono::steady_clock::now() + milliseconds(impl_.options.linger_timeout_ms);
    buffer_.consume(buffer_.size());
    Linger();
  }

  void Linger() {
    Tcp().expires_at(linger_deadline_);
    auto self = this->shared_from_this();
    auto on_read = [self](beast::error_code ec, std::size_t bytes) {
      self->lingered_bytes_ += bytes;
      if (!ec && self->lingered_bytes_ < self->impl_.options.linger_max_bytes) {
        self->Linger();  // the bytes were not committed: the buffer is reused
        return;
      }
      if constexpr (kTls) {
        if (ec == asio::error::eof) {  // the client's close_notify: answer it, then close
          self->Tcp().expires_after(std::chrono::seconds(1));
          self->stream_.async_shutdown([self](beast::error_code) { self->EndLinger(); });
          return;
        }
      }
      self->EndLinger();
    };
    if constexpr (kTls) {
      stream_.async_read_some(buffer_.prepare(64 * 1024), std::move(on_read));
    } else {
      Tcp().async_read_some(buffer_.prepare(64 * 1024), std::move(on_read));
    }
  }

  void EndLinger() {
    phase_ = Phase::kClosed;
    beast::error_code ignored;
    Tcp().socket().close(ignored);
  }

  void ReleaseCharge() {
    if (charged_ > 0) impl_.budget->Release(std::exchange(charged_, 0));
  }

  HttpServer::Impl& impl_;
  const std::shared_ptr<std::atomic<int64_t>> connections_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::unique_ptr<bhttp::response<bhttp::string_body>> response_;
  bool keep_alive_ = true;
  // The coding the request being answered asked for (Accept-Encoding); identity for refusals
  // written before a request was read in full.
  ContentCoding response_coding_ = ContentCoding::kIdentity;
  Phase phase_ = Phase::kIdle;
  bool first_request_pending_ = true;  // no byte of a request read yet on this connection
  bool watching_ = false;              // a disconnect watch (async_wait) is pending
  uint64_t watch_generation_ = 0;      // the request a watch belongs to
  uint64_t charged_ = 0;               // budget bytes held for the request being read
  std::shared_ptr<std::atomic<bool>> client_gone_;
  std::chrono::steady_clock::time_point linger_deadline_;
  uint64_t lingered_bytes_ = 0;
};

}  // namespace sluice::server::http::internal
