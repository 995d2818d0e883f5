// The HTTP front end's behaviour at its edges (issue 21, the review's five defects), against the
// real sluice-server process on loopback:
//   1. SIGTERM: answers already posted or being written are written in full, every answer during
//      the drain says `Connection: close`, idle keep-alive connections are closed at once;
//   2. --http-max-body-bytes (default 256 MiB) and the in-flight body budget shared by all
//      connections (--http-max-inflight-bytes: 503 + Retry-After before the body is read);
//   3. --http-max-json-bytes: a large JSON part is refused (413) before it is parsed;
//   4. a refusal that leaves the body unread still reaches a client that sends its whole body
//      before reading (the server drains what keeps coming instead of resetting the connection);
//   5. a client that closes its connection while its request is queued cancels the request (as
//      gRPC's cancellation does), and HTTP infers are counted in sluice_http_infer_requests_active.
// The connection is client/http_connection.h, which puts bytes on the wire as they are given.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/http_connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/server_process.h"
#include "tests/support/http_get.h"

namespace sluice {
namespace {

using client::HttpConnection;
using client::HttpReply;
using nlohmann::json;
using ::testing::HasSubstr;
using testing::ScrapeValue;
using testing::ServerProcess;

std::unique_ptr<HttpConnection> Connect(const ServerProcess& server, int timeout_ms = 10000) {
  auto connection = HttpConnection::Connect("127.0.0.1", server.http_port(), timeout_ms);
  EXPECT_TRUE(connection.ok()) << connection.status();
  return connection.ok() ? *std::move(connection) : nullptr;
}

std::string ErrorOf(const HttpReply& reply) {
  json parsed = json::parse(reply.body, nullptr, false);
  if (parsed.is_discarded() || !parsed.contains("error")) return "<no error body: " + reply.body;
  return parsed["error"].get<std::string>();
}

template <typename Predicate>
bool WaitUntil(std::chrono::milliseconds timeout, Predicate done) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

// A whole request as bytes: `method target`, the body, and extra header lines.
std::string RawRequest(const std::string& target, const std::string& body,
                       const std::string& extra_headers = "") {
  return absl::StrCat("POST ", target, " HTTP/1.1\r\nHost: x\r\nContent-Length: ", body.size(),
                      "\r\n", extra_headers, "\r\n", body);
}

// An identity infer with `floats` FP32 values as binary data, answered in binary too; sets
// `header_length` (the Inference-Header-Content-Length).
std::string IdentityBinaryBody(size_t floats, size_t& header_length) {
  const json header = {{"inputs",
                        {{{"name", "INPUT0"},
                          {"shape", {1, floats}},
                          {"datatype", "FP32"},
                          {"parameters", {{"binary_data_size", floats * 4}}}}}},
                       {"parameters", {{"binary_data_output", true}}}};
  std::string body = header.dump();
  header_length = body.size();
  std::vector<float> values(floats);
  for (size_t i = 0; i < floats; ++i) values[i] = static_cast<float>(i % 1000);
  body.append(reinterpret_cast<const char*>(values.data()), floats * 4);
  return body;
}

// A JSON infer of `model` with one FP32 value in `IN` of shape [1, 1].
std::string OneValueJson(float value) {
  return json{
      {"inputs", {{{"name", "IN"}, {"shape", {1, 1}}, {"datatype", "FP32"}, {"data", {value}}}}}}
      .dump();
}

class TempRepository {
 public:
  TempRepository() {
    root_ = std::filesystem::path(::testing::TempDir()) /
            absl::StrCat("sluice_http_edges_", getpid(), "_", counter_++);
    std::filesystem::create_directories(root_);
    std::filesystem::copy(std::filesystem::path(testing::BundledModelRepository()) / "identity",
                          root_ / "identity", std::filesystem::copy_options::recursive);
  }
  ~TempRepository() { std::filesystem::remove_all(root_); }
  void Add(const std::string& name, const std::string& config) {
    std::filesystem::create_directories(root_ / name / "1");
    std::ofstream(root_ / name / "config.pbtxt") << config;
  }
  std::string path() const { return root_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path root_;
};

// One request at a time, each taking `delay_ms`.
std::string SlowConfig(int delay_ms) {
  return absl::StrCat(R"(
backend: "identity"
max_batch_size: 1
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "execute_delay_ms" value: { string_value: ")",
                      delay_ms, R"(" } }
dynamic_batching { }
)");
}

// Item 1. At SIGTERM the server holds: a 32 MiB answer being written to a client that has not
// read it yet (A), a keep-alive connection idle between requests (B), a request running (C) and
// one queued behind it (D) on a model that runs one at a time for 800 ms. Before the fix, the
// I/O threads were stopped right after the engine shut down: A's answer was cut short (as was
// any answer posted but not yet written); C's and D's answers, written during the drain, kept
// their connections alive; B stayed open until the process ended.
TEST(HttpDrainTest, SigtermWritesEveryAnswerWithConnectionCloseAndClosesIdleConnections) {
  TempRepository repo;
  repo.Add("slow", SlowConfig(800));
  auto server =
      ServerProcess::Start({"--model-repository=" + repo.path(), "--exit-timeout-secs=10"});
  ASSERT_TRUE(server.ok()) << server.status();

  // A: 32 MiB out, far more than loopback's socket buffers hold: the write stays in progress.
  constexpr size_t kFloats = 8 << 20;
  size_t header_length = 0;
  const std::string big = IdentityBinaryBody(kFloats, header_length);
  auto a = Connect(**server, 30000);
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->SendRaw(RawRequest("/v2/models/identity/infer", big,
                                    absl::StrCat("Inference-Header-Content-Length: ", header_length,
                                                 "\r\n")))
                  .ok());
  // B: one request answered, then idle.
  auto b = Connect(**server);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->Request("GET", "/v2/health/ready")->status, 200);
  // C and D on the slow model (800 ms each, one at a time).
  std::vector<std::unique_ptr<HttpConnection>> slow;
  for (int i = 0; i < 2; ++i) {
    slow.push_back(Connect(**server));
    ASSERT_NE(slow.back(), nullptr);
    ASSERT_TRUE(slow.back()->SendRaw(RawRequest("/v2/models/slow/infer", OneValueJson(i))).ok());
    if (i == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // C runs first
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto sigterm = std::chrono::steady_clock::now();
  ASSERT_EQ(kill((*server)->pid(), SIGTERM), 0);

  // B is closed by the drain, long before the process ends (C and D hold it for more than a
  // second).
  EXPECT_TRUE(b->WaitForClose(700)) << "an idle keep-alive connection stayed open in the drain";
  EXPECT_LT(std::chrono::steady_clock::now() - sigterm, std::chrono::milliseconds(900));

  // Each gets an answer, and each answer closes its connection.
  std::vector<int> statuses;
  for (auto& connection : slow) {
    absl::StatusOr<HttpReply> reply = connection->ReadReply();
    ASSERT_TRUE(reply.ok()) << "an answer was lost in the drain: " << reply.status() << "\n"
                            << (*server)->Log();
    statuses.push_back(reply->status);
    EXPECT_EQ(reply->Header("Connection"), "close") << reply->status << " " << reply->body;
    connection.reset();
  }
  EXPECT_EQ(statuses, (std::vector<int>{200, 200}));

  // A: by now the engine is shut down and the server is stopping (what is left of the exit
  // timeout bounds the wait); its answer is still written in full.
  ASSERT_TRUE(WaitUntil(std::chrono::seconds(10),
                        [&] { return (*server)->Log().find("final stats") != std::string::npos; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  absl::StatusOr<HttpReply> answer = a->ReadReply();
  ASSERT_TRUE(answer.ok()) << "the answer being written at shutdown was lost: " << answer.status();
  EXPECT_EQ(answer->status, 200);
  const size_t json_length = std::stoul(answer->Header("Inference-Header-Content-Length"));
  EXPECT_EQ(answer->body.size(), json_length + kFloats * 4);
  a.reset();
  EXPECT_EQ((*server)->Stop().value_or(-1), 0) << (*server)->Log();
}

// Item 2, the default: a body over 256 MiB is refused from its Content-Length (before, the limit
// was gRPC's 2 GiB and the server set out to read it).
TEST(HttpLimitsTest, DefaultBodyLimitIs256MiB) {
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository()});
  ASSERT_TRUE(server.ok()) << server.status();
  auto c = Connect(**server, 5000);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->SendRaw("POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
                         "Content-Length: 300000000\r\n\r\n")
                  .ok());
  absl::StatusOr<HttpReply> reply = c->ReadReply();
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 413);
  EXPECT_THAT(ErrorOf(*reply), HasSubstr("268435456 bytes (--http-max-body-bytes)"));
}

// Item 2: the in-flight budget is shared by every connection and charged at the header.
TEST(HttpLimitsTest, InflightBodyBudgetIsSharedByAllConnections) {
  auto server =
      ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository(),
                            "--http-max-body-bytes=1048576", "--http-max-inflight-bytes=2097152"});
  ASSERT_TRUE(server.ok()) << server.status();
  size_t header_length = 0;
  const std::string body = IdentityBinaryBody(225000, header_length);  // ~900 KB
  const std::string length_header =
      absl::StrCat("Inference-Header-Content-Length: ", header_length, "\r\n");
  const std::string request = RawRequest("/v2/models/identity/infer", body, length_header);
  const size_t half = request.size() - body.size() / 2;
  // Two bodies half sent: 1.8 MB of the 2 MiB charged.
  auto c1 = Connect(**server);
  auto c2 = Connect(**server);
  ASSERT_NE(c1, nullptr);
  ASSERT_NE(c2, nullptr);
  ASSERT_TRUE(c1->SendRaw(request.substr(0, half)).ok());
  ASSERT_TRUE(c2->SendRaw(request.substr(0, half)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // A third does not fit: 503 with Retry-After, though it sends its whole body first.
  auto c3 = Connect(**server);
  ASSERT_NE(c3, nullptr);
  absl::StatusOr<HttpReply> refused =
      c3->Request("POST", "/v2/models/identity/infer", body,
                  {{"Inference-Header-Content-Length", absl::StrCat(header_length)}});
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(refused->Header("Retry-After"), "1");
  EXPECT_THAT(ErrorOf(*refused), HasSubstr("--http-max-inflight-bytes"));
  // A chunked body is charged as it grows: refused too once it passes what is left.
  auto chunked = Connect(**server);
  ASSERT_NE(chunked, nullptr);
  std::string chunks =
      "POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 8; ++i)
    absl::StrAppend(&chunks, "10000\r\n", std::string(65536, ' '), "\r\n");
  (void)chunked->SendRaw(chunks);
  absl::StatusOr<HttpReply> chunked_reply = chunked->ReadReply();
  ASSERT_TRUE(chunked_reply.ok()) << chunked_reply.status();
  EXPECT_EQ(chunked_reply->status, 503);
  // One over the per-request limit: 413, naming its flag.
  auto over = Connect(**server);
  ASSERT_NE(over, nullptr);
  ASSERT_TRUE(over->SendRaw("POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
                            "Content-Length: 1500000\r\n\r\n")
                  .ok());
  absl::StatusOr<HttpReply> too_big = over->ReadReply();
  ASSERT_TRUE(too_big.ok()) << too_big.status();
  EXPECT_EQ(too_big->status, 413);
  EXPECT_THAT(ErrorOf(*too_big), HasSubstr("1048576 bytes (--http-max-body-bytes)"));
  // The two held bodies complete and are answered; their bytes are given back.
  for (auto* c : {c1.get(), c2.get()}) {
    ASSERT_TRUE(c->SendRaw(request.substr(half)).ok());
    absl::StatusOr<HttpReply> reply = c->ReadReply();
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->status, 200) << reply->body;
  }
  bool served = false;
  for (int i = 0; i < 100 && !served; ++i) {
    auto again = Connect(**server);
    absl::StatusOr<HttpReply> reply =
        again->Request("POST", "/v2/models/identity/infer", body,
                       {{"Inference-Header-Content-Length", absl::StrCat(header_length)}});
    served = reply.ok() && reply->status == 200;
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(served) << "the budget was not given back";
}

// Item 3: a JSON part over --http-max-json-bytes is refused before it is parsed; the same tensor
// in binary is served.
TEST(HttpLimitsTest, LargeJsonIsRefusedAndBinaryIsServed) {
  auto server = ServerProcess::Start(
      {"--model-repository=" + testing::BundledModelRepository(), "--http-max-json-bytes=65536"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto c = Connect(**server);
  ASSERT_NE(c, nullptr);
  std::vector<float> values(20000, 1.25f);
  const std::string big_json = json{
      {"inputs",
       {{{"name", "INPUT0"},
         {"shape", {1, values.size()}},
         {"datatype", "FP32"},
         {"data", values}}}}}.dump();
  ASSERT_GT(big_json.size(), 65536u);
  absl::StatusOr<HttpReply> refused = c->Request("POST", "/v2/models/identity/infer", big_json);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->status, 413);
  EXPECT_THAT(ErrorOf(*refused), HasSubstr("--http-max-json-bytes"));
  EXPECT_THAT(ErrorOf(*refused), HasSubstr("binary"));
  size_t header_length = 0;
  const std::string binary = IdentityBinaryBody(values.size(), header_length);
  absl::StatusOr<HttpReply> served =
      c->Request("POST", "/v2/models/identity/infer", binary,
                 {{"Inference-Header-Content-Length", absl::StrCat(header_length)}});
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(served->status, 200);
}

// Item 4: a client that sends its whole 4 MiB body before reading (as curl and most libraries
// do without Expect: 100-continue) gets the 413. Before, the server closed the socket with the
// body unread; the kernel answered the rest of the body with a reset and the client's send failed
// (or its read found the reset instead of the answer).
TEST(HttpLimitsTest, RefusalWithTheBodyUnreadReachesAClientStillSending) {
  auto server = ServerProcess::Start(
      {"--model-repository=" + testing::BundledModelRepository(), "--max-request-bytes=1048576"});
  ASSERT_TRUE(server.ok()) << server.status();
  for (int round = 0; round < 3; ++round) {
    auto c = Connect(**server);
    ASSERT_NE(c, nullptr);
    absl::StatusOr<HttpReply> reply =
        c->Request("POST", "/v2/models/identity/infer", std::string(4 << 20, 'x'));
    ASSERT_TRUE(reply.ok()) << "round " << round << ": " << reply.status();
    EXPECT_EQ(reply->status, 413);
    EXPECT_THAT(ErrorOf(*reply), HasSubstr("--max-request-bytes"));
  }
}

// Item 4 over TLS: curl sending a 4 MiB body (no Expect: 100-continue) to a TLS port whose limit
// is 1 MiB gets its 413 every time. Before, the TLS close (close_notify, then close) left the body
// unread and some curls got a reset instead (exit code 55: 2 of 20 with main's binary).
TEST(HttpLimitsTest, RefusalWithTheBodyUnreadReachesATlsClientStillSending) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "sluice-http-linger-", getpid());
  std::filesystem::create_directories(dir);
  const std::string make = absl::StrCat(
      "cd '", dir, "' && openssl ecparam -name prime256v1 -genkey -noout -out server.key && ",
      "openssl req -x509 -new -key server.key -subj /CN=localhost -days 1 ",
      "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -out server.pem && ",
      "head -c 4194304 /dev/zero > body.bin");
  ASSERT_EQ(std::system(("(" + make + ") >/dev/null 2>&1").c_str()), 0)
      << "openssl could not make a certificate";
  auto server = ServerProcess::Start(
      {"--model-repository=" + testing::BundledModelRepository(), "--max-request-bytes=1048576",
       "--tls-cert=" + dir + "/server.pem", "--tls-key=" + dir + "/server.key"});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string command = absl::StrCat(
      "curl -s -o /dev/null -w '%{http_code}' --max-time 10 --cacert ", dir,
      "/server.pem -H 'Expect:' -H 'Content-Type: application/json' --data-binary @", dir,
      "/body.bin https://127.0.0.1:", (*server)->http_port(), "/v2/models/identity/infer");
  int refused = 0;
  for (int round = 0; round < 20; ++round) {
    FILE* pipe = popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string out;
    char buffer[64];
    while (fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
    const int status = pclose(pipe);
    EXPECT_EQ(out, "413") << "round " << round << ": curl exit status " << status;
    refused += out == "413" ? 1 : 0;
  }
  EXPECT_EQ(refused, 20);
  std::filesystem::remove_all(dir);
}

// Item 5: a client that closes its connection while its request is queued: the request leaves
// the queue unrun and is counted cancelled, as on gRPC; the HTTP gauge counts it while open.
TEST(HttpCancelTest, ClientThatClosesItsConnectionCancelsItsQueuedRequest) {
  TempRepository repo;
  // Held in the queue for up to 60 s (a batch of 1024 never fills).
  repo.Add("held", R"(
backend: "identity"
max_batch_size: 1024
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
dynamic_batching {
  max_queue_delay_microseconds: 60000000
  default_queue_policy { allow_timeout_override: true }
}
)");
  auto server = ServerProcess::Start({"--model-repository=" + repo.path()});
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->metrics_port();
  auto metric = [port](const std::string& series) {
    return ScrapeValue(port, series).value_or(-1);
  };
  const std::string model = R"(model="held",version="1")";
  const std::string depth = absl::StrCat("sluice_queue_depth{", model, "}");
  const std::string cancelled = absl::StrCat("sluice_inference_requests_total{", model,
                                             R"(,outcome="failure",reason="cancelled"})");
  const std::string active = "sluice_http_infer_requests_active";
  EXPECT_EQ(metric(active), 0);
  for (int round = 1; round <= 3; ++round) {
    auto c = Connect(**server);
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->SendRaw(RawRequest("/v2/models/held/infer", OneValueJson(1))).ok());
    ASSERT_TRUE(WaitUntil(std::chrono::seconds(10), [&] { return metric(depth) == 1; }));
    EXPECT_EQ(metric(active), 1);
    c.reset();  // the client goes away
    ASSERT_TRUE(WaitUntil(
        std::chrono::seconds(10),
        [&] { return metric(cancelled) == round && metric(depth) == 0 && metric(active) == 0; }))
        << "round " << round << ": cancelled " << metric(cancelled) << ", queue depth "
        << metric(depth) << ", open " << metric(active);
  }
  EXPECT_EQ(metric(absl::StrCat("sluice_batches_total{", model, "}")), 0);  // none ran
  // A client that stays gets its answer (the watch does not mistake a live client for a gone
  // one): a request with a 100 ms queue timeout is answered 504 on the same connection.
  auto stays = Connect(**server);
  ASSERT_NE(stays, nullptr);
  json timed = json::parse(OneValueJson(2));
  timed["parameters"] = {{"timeout", 100000}};
  absl::StatusOr<HttpReply> reply = stays->Request("POST", "/v2/models/held/infer", timed.dump());
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 504) << reply->body;
  // (The count drops when the engine lets the request go, just after it is answered.)
  EXPECT_TRUE(WaitUntil(std::chrono::seconds(5), [&] { return metric(active) == 0; }));
}

}  // namespace
}  // namespace sluice
