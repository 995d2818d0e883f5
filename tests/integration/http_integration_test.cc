// The KServe v2 HTTP/REST front end (issue 21) against the real sluice-server process on
// loopback: every endpoint, JSON and binary tensors (Triton's binary tensor extension) for every
// datatype, the errors (malformed JSON, bad lengths and offsets, oversized bodies, unknown
// models), Expect: 100-continue. Load/unload, timeouts, the connection cap, sluice-loadtest over
// HTTP and TLS are in http_lifecycle_integration_test.cc.
// The connection is client/http_connection.h, which puts bytes on the wire as they are given.

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/http_connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/http_integration_test_util.h"
#include "tests/integration/server_process.h"

namespace sluice {
namespace {

using client::HttpConnection;
using client::HttpReply;
using nlohmann::json;
using ::sluice::testing::BinaryBody;
using ::sluice::testing::Bytes;
using ::sluice::testing::Call;
using ::sluice::testing::Connect;
using ::sluice::testing::ErrorOf;
using ::sluice::testing::Parse;
using ::sluice::testing::ServerProcess;
using ::sluice::testing::SimpleJson;
using ::sluice::testing::TempRepository;
using ::testing::HasSubstr;

class HttpIntegrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto server = ServerProcess::Start(
        {"--model-repository=" + testing::BundledModelRepository(), "--max-request-bytes=1048576"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value().release();
    ASSERT_GT(server_->http_port(), 0) << server_->Log();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static ServerProcess* server_;
};
ServerProcess* HttpIntegrationTest::server_ = nullptr;

TEST_F(HttpIntegrationTest, HealthMetadataConfigStatsAndIndex) {
  auto c = Connect(*server_);
  ASSERT_NE(c, nullptr);
  // Keep-alive: every call below on the one connection.
  HttpReply meta = Call(*c, "GET", "/v2");
  EXPECT_EQ(meta.status, 200);
  EXPECT_EQ(Parse(meta)["name"], "sluice");
  EXPECT_THAT(meta.Header("Content-Type"), HasSubstr("application/json"));
  EXPECT_EQ(Call(*c, "GET", "/v2/health/live").status, 200);
  EXPECT_EQ(Call(*c, "GET", "/v2/health/ready").status, 200);
  EXPECT_EQ(Call(*c, "GET", "/v2/models/simple/ready").status, 200);
  EXPECT_EQ(Call(*c, "GET", "/v2/models/simple/versions/1/ready").status, 200);
  EXPECT_EQ(Call(*c, "GET", "/v2/models/simple/versions/7/ready").status, 400);

  json model = Parse(Call(*c, "GET", "/v2/models/simple"));
  EXPECT_EQ(model["name"], "simple");
  EXPECT_EQ(model["versions"], json({"1"}));
  EXPECT_EQ(model["inputs"][0]["name"], "INPUT0");
  EXPECT_EQ(model["inputs"][0]["datatype"], "INT32");
  EXPECT_EQ(model["inputs"][0]["shape"], json({-1, 16}));
  EXPECT_EQ(Parse(Call(*c, "GET", "/v2/models/simple/versions/1"))["name"], "simple");

  json config = Parse(Call(*c, "GET", "/v2/models/simple/config"));
  EXPECT_EQ(config["name"], "simple");
  EXPECT_EQ(config["max_batch_size"], 8);  // a number, as Triton writes it
  EXPECT_EQ(config["input"][0]["data_type"], "TYPE_INT32");
  EXPECT_EQ(config["input"][0]["dims"], json({16}));

  ASSERT_EQ(Call(*c, "POST", "/v2/models/simple/infer", SimpleJson().dump()).status, 200);
  json stats = Parse(Call(*c, "GET", "/v2/models/simple/stats"));
  ASSERT_EQ(stats["model_stats"].size(), 1u);
  EXPECT_EQ(stats["model_stats"][0]["version"], "1");
  EXPECT_GE(stats["model_stats"][0]["inference_stats"]["success"]["count"].get<int64_t>(), 1);
  EXPECT_GE(Parse(Call(*c, "GET", "/v2/models/stats"))["model_stats"].size(), 3u);

  json index = Parse(Call(*c, "POST", "/v2/repository/index", "{}"));
  ASSERT_TRUE(index.is_array());
  EXPECT_GE(index.size(), 3u);
  EXPECT_EQ(index[0]["state"], "READY");
  EXPECT_EQ(Call(*c, "POST", "/v2/repository/index").status, 200);  // an empty body too
  EXPECT_FALSE(c->closed());
}

TEST_F(HttpIntegrationTest, UnknownModelsEndpointsAndMethods) {
  auto c = Connect(*server_);
  ASSERT_NE(c, nullptr);
  HttpReply unknown = Call(*c, "GET", "/v2/models/nope");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_THAT(ErrorOf(unknown), HasSubstr("nope"));
  EXPECT_EQ(Call(*c, "POST", "/v2/models/nope/infer", SimpleJson().dump()).status, 404);
  EXPECT_EQ(Call(*c, "GET", "/v2/models/simple/versions/9").status, 404);
  EXPECT_EQ(Call(*c, "GET", "/v2/models/simple/versions/x").status, 400);
  EXPECT_EQ(Call(*c, "GET", "/v2/nothing").status, 404);
  EXPECT_EQ(Call(*c, "GET", "/metrics").status, 404);
  HttpReply wrong = Call(*c, "GET", "/v2/models/simple/infer");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.Header("Allow"), "POST");
  EXPECT_EQ(Call(*c, "DELETE", "/v2").status, 405);
  // Load/unload are refused without --model-control-mode=explicit, as on gRPC.
  HttpReply load = Call(*c, "POST", "/v2/repository/models/simple/load");
  EXPECT_EQ(load.status, 400);
  EXPECT_THAT(ErrorOf(load), HasSubstr("--model-control-mode=explicit"));
}

TEST_F(HttpIntegrationTest, SimpleWithJsonTensors) {
  auto c = Connect(*server_);
  ASSERT_NE(c, nullptr);
  HttpReply reply = Call(*c, "POST", "/v2/models/simple/infer", SimpleJson().dump(),
                         {{"Content-Type", "application/json"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.Header("Inference-Header-Content-Length"), "");
  json answer = Parse(reply);
  EXPECT_EQ(answer["model_name"], "simple");
  EXPECT_EQ(answer["model_version"], "1");
  EXPECT_EQ(answer["id"], "r1");
  ASSERT_EQ(answer["outputs"].size(), 2u);
  EXPECT_EQ(answer["outputs"][0]["name"], "OUTPUT0");
  EXPECT_EQ(answer["outputs"][0]["datatype"], "INT32");
  EXPECT_EQ(answer["outputs"][0]["shape"], json({1, 16}));
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(answer["outputs"][0]["data"][i], i + 1);
    EXPECT_EQ(answer["outputs"][1]["data"][i], i - 1);
  }
  // Nested data, a named output, and parameters as on gRPC.
  json nested = SimpleJson();
  nested["inputs"][0]["data"] = json::array({nested["inputs"][0]["data"]});
  nested["outputs"] = {{{"name", "OUTPUT1"}}};
  nested["parameters"] = {{"priority", 0}, {"timeout", 1000000}};
  json only = Parse(Call(*c, "POST", "/v2/models/simple/versions/1/infer", nested.dump()));
  ASSERT_EQ(only["outputs"].size(), 1u);
  EXPECT_EQ(only["outputs"][0]["name"], "OUTPUT1");
  EXPECT_EQ(only["outputs"][0]["data"][15], 14);
}

TEST_F(HttpIntegrationTest, SimpleWithBinaryTensorsBothWays) {
  auto c = Connect(*server_);
  ASSERT_NE(c, nullptr);
  std::vector<int32_t> a(16), b(16);
  for (int i = 0; i < 16; ++i) {
    a[i] = 1000 * i;
    b[i] = -i;
  }
  json header = {{"inputs",
                  {{{"name", "INPUT0"},
                    {"shape", {1, 16}},
                    {"datatype", "INT32"},
                    {"parameters", {{"binary_data_size", 64}}}},
                   {{"name", "INPUT1"},
                    {"shape", {1, 16}},
                    {"datatype", "INT32"},
                    {"parameters", {{"binary_data_size", 64}}}}}},
                 {"outputs",
                  {{{"name", "OUTPUT0"}, {"parameters", {{"binary_data", true}}}},
                   {{"name", "OUTPUT1"}, {"parameters", {{"binary_data", false}}}}}}};
  size_t header_length = 0;
  const std::string body = BinaryBody(header, Bytes(a) + Bytes(b), header_length);
  HttpReply reply = Call(*c, "POST", "/v2/models/simple/infer", body,
                         {{"Inference-Header-Content-Length", absl::StrCat(header_length)},
                          {"Content-Type", "application/octet-stream"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const std::string length = reply.Header("Inference-Header-Content-Length");
  ASSERT_FALSE(length.empty());
  const size_t json_size = std::stoul(length);
  json answer = json::parse(reply.body.substr(0, json_size));
  EXPECT_EQ(answer["outputs"][0]["parameters"]["binary_data_size"], 64);
  EXPECT_FALSE(answer["outputs"][0].contains("data"));
  EXPECT_EQ(answer["outputs"][1]["data"][3], 3003);
  ASSERT_EQ(reply.body.size(), json_size + 64);
  std::vector<int32_t> sum(16);
  std::memcpy(sum.data(), reply.body.data() + json_size, 64);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(sum[i], 1000 * i - i);

  // binary_data_output: every output binary.
  json all = SimpleJson();
  all["parameters"] = {{"binary_data_output", true}};
  HttpReply binary = Call(*c, "POST", "/v2/models/simple/infer", all.dump());
  ASSERT_EQ(binary.status, 200);
  EXPECT_EQ(binary.body.size(), std::stoul(binary.Header("Inference-Header-Content-Length")) + 128);
}

TEST_F(HttpIntegrationTest, IdentityAndMlpRoundTrip) {
  auto c = Connect(*server_);
  ASSERT_NE(c, nullptr);
  std::vector<float> x(1024);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * static_cast<float>(i) - 7.0f;
  json request = {
      {"inputs", {{{"name", "INPUT0"}, {"shape", {1, 1024}}, {"datatype", "FP32"}, {"data", x}}}}};
  json answer = Parse(Call(*c, "POST", "/v2/models/identity/infer", request.dump()));
  ASSERT_EQ(answer["outputs"][0]["data"].size(), 1024u);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(answer["outputs"][0]["data"][i].get<float>(), x[i]);

  json mlp = Parse(Call(*c, "GET", "/v2/models/mlp"));
  const std::string input = mlp["inputs"][0]["name"];
  const int64_t width = mlp["inputs"][0]["shape"][1];
  json mlp_request = {{"inputs",
                       {{{"name", input},
                         {"shape", {2, width}},
                         {"datatype", mlp["inputs"][0]["datatype"]},
                         {"data", std::vector<float>(2 * width, 0.5f)}}}}};
  HttpReply reply = Call(*c, "POST", "/v2/models/mlp/infer", mlp_request.dump());
  ASSERT_EQ(reply.status, 200) << reply.body;
  json out = Parse(reply);
  EXPECT_EQ(out["outputs"][0]["shape"][0], 2);
}

TEST_F(HttpIntegrationTest, BadRequestsGetClearErrorsAndTheServerKeepsServing) {
  auto c = Connect(*server_);
  ASSERT_NE(c, nullptr);
  auto expect_400 = [&](const std::string& body, const std::string& needle,
                        const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    HttpReply reply = Call(*c, "POST", "/v2/models/simple/infer", body, headers);
    EXPECT_EQ(reply.status, 400) << body.substr(0, 200) << " -> " << reply.body;
    EXPECT_THAT(ErrorOf(reply), HasSubstr(needle)) << body.substr(0, 200);
  };
  expect_400("{\"inputs\": [", "not valid JSON");
  expect_400("[1,2]", "JSON object");
  expect_400("{}", "'inputs' is missing");
  json wrong_count = SimpleJson();
  wrong_count["inputs"][0]["data"] = {1, 2, 3};
  expect_400(wrong_count.dump(), "needs 16 elements but data holds 3");
  json wrong_type = SimpleJson();
  wrong_type["inputs"][0]["datatype"] = "FP32";
  expect_400(wrong_type.dump(), "INPUT0");  // the engine's message, as on gRPC
  json bad_dtype = SimpleJson();
  bad_dtype["inputs"][0]["datatype"] = "INT31";
  expect_400(bad_dtype.dump(), "unknown datatype 'INT31'");
  json not_int = SimpleJson();
  not_int["inputs"][0]["data"][0] = "x";
  expect_400(not_int.dump(), "data[0] is not an integer");
  json priority = SimpleJson();
  priority["parameters"] = {{"priority", -1}};
  expect_400(priority.dump(), "must be >= 0");

  json header = {{"inputs",
                  {{{"name", "INPUT0"},
                    {"shape", {1, 16}},
                    {"datatype", "INT32"},
                    {"parameters", {{"binary_data_size", 64}}}},
                   {{"name", "INPUT1"},
                    {"shape", {1, 16}},
                    {"datatype", "INT32"},
                    {"parameters", {{"binary_data_size", 64}}}}}}};
  size_t length = 0;
  const std::string short_body = BinaryBody(header, std::string(100, '\0'), length);
  expect_400(short_body, "runs past", {{"Inference-Header-Content-Length", absl::StrCat(length)}});
  const std::string long_body = BinaryBody(header, std::string(130, '\0'), length);
  expect_400(long_body, "add up to", {{"Inference-Header-Content-Length", absl::StrCat(length)}});
  expect_400(long_body, "exceeds the body", {{"Inference-Header-Content-Length", "999999"}});
  expect_400(long_body, "not a byte count", {{"Inference-Header-Content-Length", "-4"}});
  expect_400(long_body, "not valid JSON", {{"Inference-Header-Content-Length", "10"}});

  // Still serving on the same connection.
  EXPECT_EQ(Call(*c, "POST", "/v2/models/simple/infer", SimpleJson().dump()).status, 200);
}

TEST_F(HttpIntegrationTest, MalformedHttpAndOversizedBodiesAreRefused) {
  {  // A Content-Length that is not a number: 400, then the connection closes.
    auto c = Connect(*server_);
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->SendRaw("POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
                           "Content-Length: 12x\r\n\r\n{}")
                    .ok());
    absl::StatusOr<HttpReply> reply = c->ReadReply();
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->status, 400);
    EXPECT_THAT(ErrorOf(*reply), HasSubstr("malformed HTTP request"));
    EXPECT_TRUE(c->WaitForClose(5000));
  }
  {  // Garbage instead of a request line.
    auto c = Connect(*server_);
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->SendRaw("\x01\x02 nonsense\r\n\r\n").ok());
    absl::StatusOr<HttpReply> reply = c->ReadReply();
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->status, 400);
  }
  {  // Over --max-request-bytes (1 MiB here): 413 before the body is read.
    auto c = Connect(*server_);
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->SendRaw("POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
                           "Content-Length: 2000000\r\n\r\n")
                    .ok());
    absl::StatusOr<HttpReply> reply = c->ReadReply();
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->status, 413);
    EXPECT_THAT(ErrorOf(*reply), HasSubstr("--max-request-bytes"));
  }
  {  // Chunked past the limit: 413 too.
    auto c = Connect(*server_);
    ASSERT_NE(c, nullptr);
    std::string chunked =
        "POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    const std::string chunk(200000, ' ');
    for (int i = 0; i < 6; ++i) absl::StrAppend(&chunked, "30d40\r\n", chunk, "\r\n");
    (void)c->SendRaw(chunked);  // the server may close before it has all of it
    absl::StatusOr<HttpReply> reply = c->ReadReply();
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->status, 413);
  }
  auto c = Connect(*server_);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(Call(*c, "GET", "/v2/health/ready").status, 200);
}

TEST_F(HttpIntegrationTest, ExpectContinueIsHonoured) {
  auto c = Connect(*server_);
  ASSERT_NE(c, nullptr);
  const std::string body = SimpleJson().dump();
  ASSERT_TRUE(c->SendRaw(absl::StrCat("POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
                                      "Expect: 100-continue\r\nContent-Length: ",
                                      body.size(), "\r\n\r\n"))
                  .ok());
  absl::StatusOr<HttpReply> proceed = c->ReadReply();
  ASSERT_TRUE(proceed.ok()) << proceed.status();
  EXPECT_EQ(proceed->status, 100);
  ASSERT_TRUE(c->SendRaw(body).ok());
  absl::StatusOr<HttpReply> reply = c->ReadReply();
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 200);
}

TEST(HttpDatatypeTest, EveryDatatypeRoundTripsAsJsonAndBinary) {
  // Each: the KServe datatype, JSON data of 4 elements, and the bytes those are on the wire.
  struct Case {
    std::string dtype;
    json data;
  };
  const std::vector<Case> cases = {
      {"BOOL", {true, false, true, true}},
      {"UINT8", {0, 1, 200, 255}},
      {"UINT16", {0, 1, 40000, 65535}},
      {"UINT32", {0, 1, 3000000000u, 4294967295u}},
      {"UINT64", {0, 1, 3000000000u, 18446744073709551615ull}},
      {"INT8", {-128, -1, 0, 127}},
      {"INT16", {-32768, -1, 0, 32767}},
      {"INT32", {-2147483648ll, -1, 0, 2147483647}},
      {"INT64", {-9223372036854775807ll, -1, 0, 9223372036854775807ll}},
      {"FP16", {0.5, -2, 1024, 0.099975586}},
      {"BF16", {0.5, -2, 1024, 3.140625}},
      {"FP32", {0.5, -2.25, 1e-7, 3.4e38}},
      {"FP64", {0.1, -2.5, 1e-300, 1.7e308}},
      {"BYTES", {"", "a", "hello world", "\"quoted\"\n"}},
  };
  TempRepository repo;
  for (const Case& c : cases) {
    // The config names BYTES as Triton does: TYPE_STRING.
    const std::string type = c.dtype == "BYTES" ? "STRING" : c.dtype;
    repo.Add("id_" + c.dtype,
             absl::StrCat("backend: \"identity\"\nmax_batch_size: 0\n",
                          "input [ { name: \"IN\" data_type: TYPE_", type, " dims: [ 4 ] } ]\n",
                          "output [ { name: \"OUT\" data_type: TYPE_", type, " dims: [ 4 ] } ]\n"));
  }
  auto server = ServerProcess::Start({"--model-repository=" + repo.path()});
  ASSERT_TRUE(server.ok()) << server.status();
  auto connection = HttpConnection::Connect("127.0.0.1", (*server)->http_port());
  ASSERT_TRUE(connection.ok()) << connection.status();
  HttpConnection& c = **connection;
  for (const Case& test : cases) {
    SCOPED_TRACE(test.dtype);
    const std::string target = "/v2/models/id_" + test.dtype + "/infer";
    json request = {
        {"inputs",
         {{{"name", "IN"}, {"shape", {4}}, {"datatype", test.dtype}, {"data", test.data}}}}};
    HttpReply reply = Call(c, "POST", target, request.dump());
    ASSERT_EQ(reply.status, 200) << reply.body;
    json answer = Parse(reply);
    EXPECT_EQ(answer["outputs"][0]["datatype"], test.dtype);
    const json& out = answer["outputs"][0]["data"];
    ASSERT_EQ(out.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      if (test.data[i].is_number_float()) {
        EXPECT_NEAR(out[i].get<double>(), test.data[i].get<double>(),
                    std::abs(test.data[i].get<double>()) * 1e-6)
            << i;
      } else {
        EXPECT_EQ(out[i], test.data[i]) << i;
      }
    }
    // The same request with every output binary: the bytes come back after the JSON header, and
    // sent back as a binary input they give the same JSON again.
    request["parameters"] = {{"binary_data_output", true}};
    HttpReply binary = Call(c, "POST", target, request.dump());
    ASSERT_EQ(binary.status, 200) << binary.body;
    const size_t length = std::stoul(binary.Header("Inference-Header-Content-Length"));
    const std::string tensor = binary.body.substr(length);
    EXPECT_EQ(
        json::parse(binary.body.substr(0, length))["outputs"][0]["parameters"]["binary_data_size"],
        tensor.size());
    json header = {{"inputs",
                    {{{"name", "IN"},
                      {"shape", {4}},
                      {"datatype", test.dtype},
                      {"parameters", {{"binary_data_size", tensor.size()}}}}}}};
    size_t header_length = 0;
    const std::string body = BinaryBody(header, tensor, header_length);
    HttpReply back = Call(c, "POST", target, body,
                          {{"Inference-Header-Content-Length", absl::StrCat(header_length)}});
    ASSERT_EQ(back.status, 200) << back.body;
    EXPECT_EQ(Parse(back)["outputs"][0]["data"], out);
  }
}

}  // namespace
}  // namespace sluice
