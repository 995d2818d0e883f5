#include "client/http_connection.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sluice::client {

std::string HttpReply::Header(absl::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (absl::EqualsIgnoreCase(key, name)) return value;
  }
  return "";
}

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(absl::string_view address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not host:port"));
  }
  std::string host(address.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::make_pair(host, port);
}

absl::StatusOr<std::unique_ptr<HttpConnection>> HttpConnection::Connect(const std::string& host,
                                                                        int port, int timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  int fd = -1;
  int error = 0;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      error = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", host, ":", port, ": ", std::strerror(error)));
  }
  return std::unique_ptr<HttpConnection>(new HttpConnection(fd, host));
}

HttpConnection::~HttpConnection() { close(fd_); }

absl::Status HttpConnection::SendRaw(absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t sent = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) {
      closed_ = true;
      return absl::UnavailableError(absl::StrCat("send failed: ", std::strerror(errno)));
    }
    bytes.remove_prefix(static_cast<size_t>(sent));
  }
  return absl::OkStatus();
}

bool HttpConnection::Fill() {
  char chunk[65536];
  for (;;) {
    const ssize_t got = recv(fd_, chunk, sizeof(chunk), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      closed_ = true;
      return false;
    }
    buffer_.append(chunk, static_cast<size_t>(got));
    return true;
  }
}

absl::StatusOr<HttpReply> HttpConnection::ReadReply() {
  size_t end = 0;
  while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
    if (!Fill()) {
      return absl::UnavailableError(buffer_.empty() ? "connection closed by the server"
                                                    : "connection closed inside a header");
    }
  }
  HttpReply reply;
  std::vector<absl::string_view> lines =
      absl::StrSplit(absl::string_view(buffer_).substr(0, end), "\r\n");
  // "HTTP/1.1 200 OK"
  std::vector<absl::string_view> status_line = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  if (status_line.size() < 2 || !absl::SimpleAtoi(status_line[1], &reply.status)) {
    return absl::InternalError(absl::StrCat("bad status line '", lines[0], "'"));
  }
  int64_t content_length = -1;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) continue;
    std::string name(absl::StripAsciiWhitespace(lines[i].substr(0, colon)));
    std::string value(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    if (absl::EqualsIgnoreCase(name, "Content-Length")) absl::SimpleAtoi(value, &content_length);
    reply.headers.emplace_back(std::move(name), std::move(value));
  }
  buffer_.erase(0, end + 4);
  if (reply.status < 200 || reply.status == 204 || reply.status == 304) return reply;  // no body
  if (content_length < 0) {  // ended by the close
    while (Fill()) {
    }
    reply.body = std::move(buffer_);
    buffer_.clear();
    return reply;
  }
  while (buffer_.size() < static_cast<size_t>(content_length)) {
    if (!Fill()) return absl::UnavailableError("connection closed inside a body");
  }
  reply.body = buffer_.substr(0, static_cast<size_t>(content_length));
  buffer_.erase(0, static_cast<size_t>(content_length));
  if (absl::EqualsIgnoreCase(reply.Header("Connection"), "close")) closed_ = true;
  return reply;
}

absl::StatusOr<HttpReply> HttpConnection::Request(
    absl::string_view method, absl::string_view target, absl::string_view body,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  if (closed_) return absl::UnavailableError("connection closed by the server");
  std::string head = absl::StrCat(method, " ", target, " HTTP/1.1\r\nHost: ", host_,
                                  "\r\nContent-Length: ", body.size(), "\r\n");
  for (const auto& [name, value] : headers) absl::StrAppend(&head, name, ": ", value, "\r\n");
  head += "\r\n";
  if (body.size() < 65536) {  // one write for small requests
    head.append(body.data(), body.size());
    if (absl::Status s = SendRaw(head); !s.ok()) return s;
  } else {
    if (absl::Status s = SendRaw(head); !s.ok()) return s;
    if (absl::Status s = SendRaw(body); !s.ok()) return s;
  }
  return ReadReply();
}

bool HttpConnection::WaitForClose(int timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!closed_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return false;
    if (poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    char chunk[4096];
    const ssize_t got = recv(fd_, chunk, sizeof(chunk), 0);
    if (got <= 0) closed_ = true;
  }
  return true;
}

}  // namespace sluice::client
