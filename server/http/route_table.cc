#include "server/http/route_table.h"

#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/check.h"

namespace sluice::server::http {
namespace {

// Percent-decodes one path segment; nullopt if an escape is malformed.
std::optional<std::string> DecodeSegment(absl::string_view segment) {
  std::string out;
  out.reserve(segment.size());
  for (size_t i = 0; i < segment.size(); ++i) {
    if (segment[i] != '%') {
      out.push_back(segment[i]);
      continue;
    }
    int value = 0;
    if (i + 2 >= segment.size()) return std::nullopt;
    for (int k = 1; k <= 2; ++k) {
      const char c = segment[i + k];
      value <<= 4;
      if (c >= '0' && c <= '9') {
        value |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        value |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        value |= c - 'A' + 10;
      } else {
        return std::nullopt;
      }
    }
    out.push_back(static_cast<char>(value));
    i += 2;
  }
  return out;
}

// The path of a request target (without its query).
absl::string_view PathOf(absl::string_view target) {
  const size_t query = target.find('?');
  return query == absl::string_view::npos ? target : target.substr(0, query);
}

}  // namespace

const std::string& RouteParams::Get(absl::string_view name) const {
  for (const auto& [key, value] : values_) {
    if (key == name) return value;
  }
  CHECK(false && "RouteParams::Get: the route's pattern has no such capture");
  static const std::string* const kNone = new std::string;
  return *kNone;
}

void RouteParams::Set(std::string name, std::string value) {
  values_.emplace_back(std::move(name), std::move(value));
}

RouteTable::RouteTable(ErrorFormatter fallback) : fallback_(std::move(fallback)) {}

void RouteTable::AddApi(std::string prefix, ErrorFormatter format) {
  apis_.emplace_back(std::move(prefix), std::move(format));
}

void RouteTable::Add(std::string method, std::string pattern, RouteHandler handler) {
  CHECK(!pattern.empty() && pattern[0] == '/');
  // An optional part "[...]" expands into two routes: with it, and without it.
  std::vector<std::pair<std::string, std::vector<std::string>>> expansions;
  const size_t open = pattern.find('[');
  if (open == std::string::npos) {
    expansions.push_back({pattern, {}});
  } else {
    const size_t close = pattern.find(']', open);
    CHECK(close != std::string::npos && pattern.find('[', open + 1) > close);
    const std::string inner = pattern.substr(open + 1, close - open - 1);
    const std::string head = pattern.substr(0, open);
    const std::string tail = pattern.substr(close + 1);
    std::vector<std::string> absent;
    for (absl::string_view part : absl::StrSplit(inner, '/', absl::SkipEmpty())) {
      if (part.size() > 2 && part.front() == '{' && part.back() == '}') {
        absent.emplace_back(part.substr(1, part.size() - 2));
      }
    }
    expansions.push_back({head + inner + tail, {}});
    expansions.push_back({head + tail, std::move(absent)});
  }
  handlers_.push_back(std::move(handler));
  for (auto& [path, absent] : expansions) {
    Route route;
    route.method = method;
    route.pattern = pattern;
    route.absent = std::move(absent);
    route.handler = handlers_.size() - 1;
    for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
      Segment segment;
      if (part.size() > 2 && part.front() == '{' && part.back() == '}') {
        segment.capture = true;
        part = part.substr(1, part.size() - 2);
      }
      segment.text = std::string(part);
      route.segments.push_back(std::move(segment));
    }
    routes_.push_back(std::move(route));
  }
}

bool RouteTable::Match(const Route& route, const std::vector<std::string>& segments,
                       RouteParams* params) const {
  if (route.segments.size() != segments.size()) return false;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (!route.segments[i].capture && route.segments[i].text != segments[i]) return false;
  }
  if (params != nullptr) {
    for (size_t i = 0; i < segments.size(); ++i) {
      if (route.segments[i].capture) params->Set(route.segments[i].text, segments[i]);
    }
    for (const std::string& name : route.absent) params->Set(name, "");
  }
  return true;
}

void RouteTable::Dispatch(HttpRequest&& request, Responder respond) const {
  std::vector<std::string> segments;
  for (absl::string_view raw : absl::StrSplit(request.path, '/', absl::SkipEmpty())) {
    std::optional<std::string> decoded = DecodeSegment(raw);
    if (!decoded.has_value()) {
      respond(Error(request.path, {.status = 400,
                                   .message = absl::StrCat("malformed percent-escape in path '",
                                                           request.path, "'")}));
      return;
    }
    segments.push_back(*std::move(decoded));
  }
  std::set<std::string> allowed;
  for (const Route& route : routes_) {
    if (!Match(route, segments, nullptr)) continue;
    if (route.method != request.method) {
      allowed.insert(route.method);
      continue;
    }
    RouteParams params;
    Match(route, segments, &params);
    handlers_[route.handler](params, std::move(request), std::move(respond));
    return;
  }
  if (!allowed.empty()) {
    const std::string allow = absl::StrJoin(allowed, ", ");
    HttpResponse response =
        Error(request.path, {.status = 405,
                             .message = absl::StrCat(request.method, " is not allowed on ",
                                                     request.path, "; use ", allow),
                             .code = "method_not_allowed"});
    response.headers.emplace_back("Allow", allow);
    respond(std::move(response));
    return;
  }
  // Say what the API that owns the path does serve.
  std::string served;
  absl::string_view prefix;
  for (const auto& api : apis_) {
    if (absl::string_view(request.path).substr(0, api.first.size()) == api.first &&
        api.first.size() > prefix.size()) {
      prefix = api.first;
    }
  }
  if (!prefix.empty()) {
    size_t last_handler = handlers_.size();
    for (const Route& route : routes_) {
      if (route.handler == last_handler ||
          absl::string_view(route.pattern).substr(0, prefix.size()) != prefix) {
        continue;
      }
      last_handler = route.handler;
      absl::StrAppend(&served, served.empty() ? "" : ", ", route.method, " ", route.pattern);
    }
  }
  respond(
      Error(request.path,
            {.status = 404,
             .message = absl::StrCat(
                 "no such endpoint: ", request.method, " ", request.path,
                 served.empty() ? "" : absl::StrCat(" (served under ", prefix, ": ", served, ")")),
             .code = "unknown_url"}));
}

const ErrorFormatter& RouteTable::FormatterFor(absl::string_view path) const {
  const ErrorFormatter* best = &fallback_;
  size_t best_length = 0;
  for (const auto& [prefix, format] : apis_) {
    if (path.substr(0, prefix.size()) == prefix && prefix.size() > best_length) {
      best = &format;
      best_length = prefix.size();
    }
  }
  return *best;
}

HttpResponse RouteTable::Error(absl::string_view path, const HttpError& error) const {
  return FormatterFor(PathOf(path))(error);
}

std::string RouteTable::ErrorBody(absl::string_view target, int status,
                                  absl::string_view message) const {
  return Error(target, {.status = status, .message = std::string(message)}).body;
}

}  // namespace sluice::server::http
