#pragma once

// The HTTP integration tests' shared helpers (http_*integration_test.cc): a keep-alive connection
// to a ServerProcess's HTTP port, calls on it, their JSON and error bodies, KServe request bodies
// (JSON and the binary tensor extension), and a temporary model repository. Test-only;
// header-only.

#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/http_connection.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/server_process.h"

namespace sluice::testing {

inline std::unique_ptr<client::HttpConnection> Connect(const ServerProcess& server) {
  auto connection = client::HttpConnection::Connect("127.0.0.1", server.http_port(), 10000);
  EXPECT_TRUE(connection.ok()) << connection.status();
  return connection.ok() ? *std::move(connection) : nullptr;
}

inline client::HttpReply Call(
    client::HttpConnection& connection, const std::string& method, const std::string& target,
    const std::string& body = "",
    const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  absl::StatusOr<client::HttpReply> reply = connection.Request(method, target, body, headers);
  EXPECT_TRUE(reply.ok()) << method << " " << target << ": " << reply.status();
  return reply.ok() ? *std::move(reply) : client::HttpReply{};
}

inline nlohmann::json Parse(const client::HttpReply& reply) {
  nlohmann::json parsed = nlohmann::json::parse(reply.body, nullptr, false);
  EXPECT_FALSE(parsed.is_discarded()) << reply.body;
  return parsed;
}

inline std::string ErrorOf(const client::HttpReply& reply) {
  nlohmann::json parsed = nlohmann::json::parse(reply.body, nullptr, false);
  if (parsed.is_discarded() || !parsed.contains("error")) return "<no error body: " + reply.body;
  return parsed["error"].get<std::string>();
}

// A `simple` JSON request: INPUT0 = 0..15, INPUT1 = 1 each.
inline nlohmann::json SimpleJson() {
  std::vector<int> a(16), b(16, 1);
  for (int i = 0; i < 16; ++i) a[i] = i;
  return {{"id", "r1"},
          {"inputs",
           {{{"name", "INPUT0"}, {"shape", {1, 16}}, {"datatype", "INT32"}, {"data", a}},
            {{"name", "INPUT1"}, {"shape", {1, 16}}, {"datatype", "INT32"}, {"data", b}}}}};
}

// The JSON header and binary tail of a binary-extension request; returns the body and sets
// `header_length`.
inline std::string BinaryBody(const nlohmann::json& header, const std::string& binary,
                              size_t& header_length) {
  const std::string text = header.dump();
  header_length = text.size();
  return text + binary;
}

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// A temporary model repository, removed with it: configs the test writes, copies of bundled models.
class TempRepository {
 public:
  TempRepository() {
    root_ = std::filesystem::path(::testing::TempDir()) /
            absl::StrCat("sluice_http_repo_", getpid(), "_", counter_++);
    std::filesystem::create_directories(root_);
  }
  ~TempRepository() { std::filesystem::remove_all(root_); }
  void Add(const std::string& name, const std::string& config) {
    std::filesystem::create_directories(root_ / name / "1");
    std::ofstream(root_ / name / "config.pbtxt") << config;
  }
  void CopyBundled(const std::string& name) {
    std::filesystem::copy(std::filesystem::path(BundledModelRepository()) / name, root_ / name,
                          std::filesystem::copy_options::recursive);
  }
  std::string path() const { return root_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path root_;
};

}  // namespace sluice::testing
