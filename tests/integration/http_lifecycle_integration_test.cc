// The HTTP front end's lifecycle against the real sluice-server process on loopback: load and
// unload in explicit mode, trickling and silent clients cut off at the timeouts, a large
// repository body refused unparsed, the connection cap, the port in the log (and HTTP turned off),
// sluice-loadtest --protocol http, TLS and mutual TLS (curl).

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/http_connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/http_integration_test_util.h"
#include "tests/integration/server_process.h"

namespace sluice {
namespace {

using client::HttpReply;
using nlohmann::json;
using ::sluice::testing::Call;
using ::sluice::testing::Connect;
using ::sluice::testing::ErrorOf;
using ::sluice::testing::Parse;
using ::sluice::testing::ServerProcess;
using ::sluice::testing::SimpleJson;
using ::sluice::testing::TempRepository;
using ::testing::HasSubstr;

TEST(HttpLifecycleTest, LoadAndUnloadInExplicitMode) {
  TempRepository repo;
  repo.CopyBundled("simple");
  repo.CopyBundled("identity");
  auto server = ServerProcess::Start({"--model-repository=" + repo.path(),
                                      "--model-control-mode=explicit", "--load-model=simple"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto c = Connect(**server);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(Call(*c, "GET", "/v2/models/identity/ready").status, 400);
  HttpReply load = Call(*c, "POST", "/v2/repository/models/identity/load", "{}");
  EXPECT_EQ(load.status, 200) << load.body;
  EXPECT_EQ(Call(*c, "GET", "/v2/models/identity/ready").status, 200);
  // tritonclient's unload body.
  HttpReply unload = Call(*c, "POST", "/v2/repository/models/identity/unload",
                          R"({"parameters": {"unload_dependents": false}})");
  EXPECT_EQ(unload.status, 200) << unload.body;
  EXPECT_EQ(Call(*c, "GET", "/v2/models/identity/ready").status, 400);
  EXPECT_EQ(Call(*c, "POST", "/v2/repository/models/nope/load").status, 404);
  HttpReply escape = Call(*c, "POST", "/v2/repository/models/..%2Fetc/load");
  EXPECT_EQ(escape.status, 400) << escape.body;
  HttpReply overrides =
      Call(*c, "POST", "/v2/repository/models/identity/load", R"({"parameters":{"config":"{}"}})");
  EXPECT_EQ(overrides.status, 400);
  EXPECT_THAT(ErrorOf(overrides), HasSubstr("not supported"));
  json index = Parse(Call(*c, "POST", "/v2/repository/index", R"({"ready": true})"));
  ASSERT_EQ(index.size(), 1u);
  EXPECT_EQ(index[0]["name"], "simple");
}

TEST(HttpLifecycleTest, TricklingClientIsCutOffOthersAreServed) {
  auto server =
      ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository(),
                            "--http-header-timeout-ms=500", "--http-body-timeout-ms=500"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto slow_header = Connect(**server);
  auto slow_body = Connect(**server);
  ASSERT_NE(slow_header, nullptr);
  ASSERT_NE(slow_body, nullptr);
  ASSERT_TRUE(slow_body
                  ->SendRaw("POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
                            "Content-Length: 100\r\n\r\n{")
                  .ok());
  const auto start = std::chrono::steady_clock::now();
  bool header_cut = false;
  // One byte every 100 ms: each arrives well inside any per-read timeout, but the whole header
  // never does.
  const std::string request = "GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-Slow: yes\r\n\r\n";
  for (char ch : request) {
    if (!slow_header->SendRaw(std::string(1, ch)).ok() || slow_header->WaitForClose(100)) {
      header_cut = true;
      break;
    }
  }
  EXPECT_TRUE(header_cut || slow_header->WaitForClose(2000));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(slow_body->WaitForClose(2000));
  // Meanwhile, and afterwards, everyone else is served.
  auto c = Connect(**server);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(Call(*c, "GET", "/v2/health/ready").status, 200);
}

// A client that connects and sends nothing is cut off at the header timeout, not the (long)
// keep-alive idle timeout: silent connects must not hold --http-max-connections slots.
TEST(HttpLifecycleTest, SilentNewConnectionIsCutOffAtTheHeaderTimeout) {
  auto server =
      ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository(),
                            "--http-header-timeout-ms=300", "--http-idle-timeout-ms=60000"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto silent = Connect(**server);
  ASSERT_NE(silent, nullptr);
  EXPECT_TRUE(silent->WaitForClose(3000)) << "a silent connection was kept past the header timeout";
}

// Repository bodies are small JSON objects; a large one is refused before nlohmann parses it.
TEST(HttpLifecycleTest, LargeRepositoryBodyIsRefusedUnparsed) {
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository()});
  ASSERT_TRUE(server.ok()) << server.status();
  auto c = Connect(**server);
  ASSERT_NE(c, nullptr);
  const std::string nested(100 * 1024, '[');
  const HttpReply reply = Call(*c, "POST", "/v2/repository/index", nested);
  EXPECT_EQ(reply.status, 413) << reply.body;
  auto again = Connect(**server);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(Call(*again, "GET", "/v2/health/ready").status, 200);
}

TEST(HttpLifecycleTest, ConnectionCapRefusesTheOneTooMany) {
  auto server = ServerProcess::Start(
      {"--model-repository=" + testing::BundledModelRepository(), "--http-max-connections=2"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto first = Connect(**server);
  auto second = Connect(**server);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(Call(*first, "GET", "/v2").status, 200);
  EXPECT_EQ(Call(*second, "GET", "/v2").status, 200);
  auto third = Connect(**server);
  ASSERT_NE(third, nullptr);
  absl::StatusOr<HttpReply> refused = third->ReadReply();
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->status, 503);
  EXPECT_THAT(ErrorOf(*refused), HasSubstr("too many connections"));
  // A closed connection frees its place.
  first.reset();
  bool served = false;
  for (int i = 0; i < 50 && !served; ++i) {
    auto again = Connect(**server);
    absl::StatusOr<HttpReply> reply = again->Request("GET", "/v2/health/live");
    served = reply.ok() && reply->status == 200;
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(served);
}

TEST(HttpLifecycleTest, LogsItsPortAndCanBeTurnedOff) {
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository(),
                                      "--http-port=0", "--allow-http=true"});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT((*server)->Log(), HasSubstr("HTTP listening on 127.0.0.1:"));
  auto disabled = ServerProcess::Start(
      {"--model-repository=" + testing::BundledModelRepository(), "--allow-http=false"});
  ASSERT_TRUE(disabled.ok()) << disabled.status();
  EXPECT_EQ((*disabled)->http_port(), 0);
  EXPECT_THAT((*disabled)->Log(), HasSubstr("HTTP disabled"));
}

// sluice-loadtest --protocol http, binary and JSON tensors: every request answered.
TEST(HttpLoadtestTest, ProtocolHttpSendsBinaryAndJson) {
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository()});
  ASSERT_TRUE(server.ok()) << server.status();
  for (const std::string& extra : {std::string(""), std::string(" --http-json")}) {
    SCOPED_TRACE(extra);
    const std::string report_path =
        absl::StrCat(::testing::TempDir(), "loadtest_http_", getpid(), ".json");
    const std::string command = absl::StrCat(
        SLUICE_LOADTEST_BINARY, " -u ", (*server)->address(),
        " --http-url 127.0.0.1:", (*server)->http_port(),
        " --protocol http --mode sync -m identity --shape INPUT0:1024 ",
        "--concurrency 2 --warmup-ms 50 --window-ms 200 --max-windows 1 --stability-percent 1000 ",
        "--no-progress --json ", report_path, extra, " >/dev/null 2>&1");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    std::ifstream in(report_path);
    const json report = json::parse(in, nullptr, false);
    ASSERT_FALSE(report.is_discarded());
    const auto& level = report["levels"][0];
    EXPECT_GT(level["succeeded"].get<int64_t>(), 0);
    EXPECT_EQ(level["failed"].get<int64_t>(), 0);
    std::filesystem::remove(report_path);
  }
}

// TLS on the HTTP port with the gRPC flags, driven by curl (the same openssl-made certificates
// as tls_integration_test).
TEST(HttpTlsTest, ServesTlsOnlyWithTheGrpcFlags) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "sluice-http-tls-", getpid());
  std::filesystem::create_directories(dir);
  const std::string make = absl::StrCat(
      "cd '", dir, "' && openssl ecparam -name prime256v1 -genkey -noout -out ca.key && ",
      "openssl req -x509 -new -key ca.key -subj /CN=sluice-test-ca -days 1 -out ca.pem && ",
      "openssl ecparam -name prime256v1 -genkey -noout -out server.key && ",
      "openssl req -new -key server.key -subj /CN=localhost -out server.csr && ",
      "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > server.ext && ",
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 ",
      "-extfile server.ext -out server.pem && ",
      "openssl ecparam -name prime256v1 -genkey -noout -out client.key && ",
      "openssl req -new -key client.key -subj /CN=sluice-test-client -out client.csr && ",
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 ",
      "-out client.pem) >/dev/null 2>&1");
  ASSERT_EQ(std::system(("(" + make).c_str()), 0) << "openssl could not make certificates";
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository(),
                                      "--tls-cert=" + dir + "/server.pem",
                                      "--tls-key=" + dir + "/server.key"});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT((*server)->Log(), HasSubstr("(TLS, "));
  const int port = (*server)->http_port();
  auto curl = [&](const std::string& args) {
    const std::string command =
        absl::StrCat("curl -s -o /dev/null -w '%{http_code}' --max-time 5 ", args, " 2>/dev/null");
    FILE* pipe = popen(command.c_str(), "r");
    std::string out;
    char buffer[64];
    while (pipe != nullptr && fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
    if (pipe != nullptr) pclose(pipe);
    return out;
  };
  EXPECT_EQ(
      curl(absl::StrCat("--cacert ", dir, "/ca.pem https://127.0.0.1:", port, "/v2/health/ready")),
      "200");
  EXPECT_EQ(curl(absl::StrCat("--cacert ", dir,
                              "/ca.pem -X POST -H 'Content-Type: "
                              "application/json' -d '",
                              SimpleJson().dump(), "' https://127.0.0.1:", port,
                              "/v2/models/simple/infer")),
            "200");
  // No CA: the certificate is not trusted. Plain HTTP on the TLS port: no answer.
  EXPECT_EQ(curl(absl::StrCat("https://127.0.0.1:", port, "/v2/health/ready")), "000");
  EXPECT_EQ(curl(absl::StrCat("http://127.0.0.1:", port, "/v2/health/ready")), "000");
  // Still serving.
  EXPECT_EQ(curl(absl::StrCat("--cacert ", dir, "/ca.pem https://127.0.0.1:", port, "/v2")), "200");
  // Mutual TLS with --tls-ca: a client certificate the CA signed is required.
  auto mutual =
      ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository(),
                            "--tls-cert=" + dir + "/server.pem", "--tls-key=" + dir + "/server.key",
                            "--tls-ca=" + dir + "/ca.pem"});
  ASSERT_TRUE(mutual.ok()) << mutual.status();
  const std::string url =
      absl::StrCat("https://127.0.0.1:", (*mutual)->http_port(), "/v2/health/ready");
  EXPECT_EQ(curl(absl::StrCat("--cacert ", dir, "/ca.pem ", url)), "000");
  EXPECT_EQ(curl(absl::StrCat("--cacert ", dir, "/ca.pem --cert ", dir, "/client.pem --key ", dir,
                              "/client.key ", url)),
            "200");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice
