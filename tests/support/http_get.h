#pragma once

// A tiny HTTP/1.0 GET over a plain loopback socket, for tests that scrape /metrics or query
// Prometheus' HTTP API: no HTTP library needed, and nothing between the test and the bytes.

#include <chrono>
#include <optional>
#include <string>

namespace sluice::testing {

struct HttpResponse {
  int status = 0;  // 0: no answer (connection refused, timeout, unparseable)
  std::string body;
};

// GET http://127.0.0.1:<port><path>; a 5 s socket timeout each way.
HttpResponse HttpGet(int port, const std::string& path);

// Value of the sample `series` (the exact text before the value, e.g. `name{a="b"}`) in a
// Prometheus text exposition; nullopt if absent.
std::optional<double> SampleValue(const std::string& exposition, const std::string& series);

// `series` scraped from http://127.0.0.1:<port>/metrics; nullopt if the scrape or the series
// failed.
std::optional<double> ScrapeValue(int port, const std::string& series);

}  // namespace sluice::testing
