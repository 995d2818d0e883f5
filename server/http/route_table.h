#pragma once

// RouteTable: the HTTP layer's map from (method, path pattern) to handler, one line per route, and
// each API's error shape by path prefix. The transport (http_server.h) knows no API: it hands
// every complete request to Dispatch() and asks ErrorBody() for the body of its own refusals.
//
// A pattern is literal segments and `{name}` captures, each capture one percent-decoded path
// segment; a bracketed part is optional: "/v2/models/{model}[/versions/{version}]/infer" matches
// with or without the version (a missing capture reads as ""). Routes are tried in the order they
// were added, so a literal route added before a capturing one wins ("/v2/models/stats" before
// "/v2/models/{model}"). A path no route matches is 404; one that some route matches with another
// method is 405 with an Allow header; a malformed percent-escape is 400. Each answered in the
// shape of the API that owns the path (the longest prefix given to AddApi).
//
// Built once, then only read: Dispatch() and ErrorBody() may run on any number of I/O threads at
// once. Add() and AddApi() are not thread-safe and must finish before the first Dispatch().

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/http/http_server.h"

namespace sluice::server::http {

// The values a request's path gave a route's `{name}` captures.
class RouteParams {
 public:
  // The value of capture `name`; "" when the pattern's optional part holding it was absent.
  // REQUIRES: the route's pattern names `name`.
  const std::string& Get(absl::string_view name) const;
  void Set(std::string name, std::string value);

 private:
  std::vector<std::pair<std::string, std::string>> values_;
};

using RouteHandler =
    std::function<void(const RouteParams& params, HttpRequest&& request, Responder respond)>;

// One error as an API reports it: the HTTP status, the message, and a machine-readable code where
// the router knows one ("unknown_url" for 404, "method_not_allowed" for 405; else empty).
struct HttpError {
  int status = 500;
  std::string message;
  std::string code;
};

// Builds an API's error response: its JSON shape, and headers such as Retry-After.
using ErrorFormatter = std::function<HttpResponse(const HttpError& error)>;

class RouteTable {
 public:
  // `fallback` formats errors on paths no API claims (KServe's {"error": "..."} in sluice).
  explicit RouteTable(ErrorFormatter fallback);

  // Paths starting with `prefix` ("/v1/", "/v2") belong to an API whose errors `format` writes.
  void AddApi(std::string prefix, ErrorFormatter format);
  // One route. REQUIRES: `pattern` starts with '/', its brackets balance and do not nest.
  void Add(std::string method, std::string pattern, RouteHandler handler);

  // Runs the route for `request` (on the caller's I/O thread; it must not block), or answers 400,
  // 404 or 405 itself.
  void Dispatch(HttpRequest&& request, Responder respond) const;

  // An error in the shape of the API that owns `path` (a request target: a query is ignored).
  HttpResponse Error(absl::string_view path, const HttpError& error) const;
  // Its body alone (HttpServerOptions::error_body).
  std::string ErrorBody(absl::string_view target, int status, absl::string_view message) const;

 private:
  struct Segment {
    std::string text;      // the literal, or the capture's name
    bool capture = false;  // `{name}`
  };
  struct Route {
    std::string method;
    std::string pattern;  // as written, for messages
    std::vector<Segment> segments;
    // Captures of the pattern's optional part that this expansion leaves out (read as "").
    std::vector<std::string> absent;
    // Index into handlers_ (an optional part expands one pattern into two routes).
    size_t handler = 0;
  };

  bool Match(const Route& route, const std::vector<std::string>& segments,
             RouteParams* params) const;
  const ErrorFormatter& FormatterFor(absl::string_view path) const;

  ErrorFormatter fallback_;
  std::vector<std::pair<std::string, ErrorFormatter>> apis_;
  std::vector<Route> routes_;
  std::vector<RouteHandler> handlers_;
};

}  // namespace sluice::server::http
