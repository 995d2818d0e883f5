// The first hour of an operator (issue 34): what a second server on a taken port does, the
// statistics fields Triton's clients and dashboards read, and failed models made visible: strict
// readiness, UNAVAILABLE with the reason on both protocols, the repository index, the state gauge
// and the log.

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "client/inference_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/grpc_health_check.h"
#include "tests/integration/http_integration_test_util.h"
#include "tests/integration/server_process.h"
#include "tests/support/http_get.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::ServerProcess;

// gRPC binds with SO_REUSEPORT unless told not to: a second server on the same port used to start,
// log "server ready" and take a share of the first one's clients. It must fail, naming the flag.
TEST(OperatorIntegrationTest, SecondServerOnATakenGrpcPortFailsNamingTheFlag) {
  auto first = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository()});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second =
      ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository(),
                            "--grpc-port=" + std::to_string((*first)->port()), "--metrics-port=0"});
  ASSERT_FALSE(second.ok()) << "a second server started on gRPC port " << (*first)->port();
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("choose another --grpc-port"));
  // The first keeps serving its own clients.
  auto client = client::InferenceClient::Create((*first)->address());
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->ServerReady().value_or(false));
  auto code = (*first)->Stop();
  EXPECT_TRUE(code.ok() && *code == 0) << (*first)->Log();
}

// Triton's InferStatistics has cache_hit and cache_miss; its clients and dashboards read them.
// sluice has no response cache: both are present, and zero, on gRPC and HTTP.
TEST(OperatorIntegrationTest, StatisticsCarryTheCacheFieldsAsZero) {
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository()});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = client::InferenceClient::Create((*server)->address());
  ASSERT_TRUE(client.ok()) << client.status();
  auto stats = (*client)->ModelStatistics("simple");
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->model_stats_size(), 1);
  const auto& infer = stats->model_stats(0).inference_stats();
  EXPECT_TRUE(infer.has_cache_hit());
  EXPECT_TRUE(infer.has_cache_miss());
  EXPECT_EQ(infer.cache_hit().count(), 0u);
  EXPECT_EQ(infer.cache_miss().count(), 0u);
  for (const std::string path :
       {"/v2/models/simple/stats", "/v2/models/embedder/tokenizer/stats"}) {
    testing::HttpResponse http = testing::HttpGet((*server)->http_port(), path);
    ASSERT_EQ(http.status, 200) << path << ": " << http.body;
    nlohmann::json body = nlohmann::json::parse(http.body);
    const nlohmann::json& entry = body["model_stats"][0]["inference_stats"];
    EXPECT_EQ(entry["cache_hit"]["count"], 0) << path << ": " << http.body;
    EXPECT_EQ(entry["cache_miss"]["ns"], 0) << path << ": " << http.body;
  }
  auto code = (*server)->Stop();
  EXPECT_TRUE(code.ok() && *code == 0) << (*server)->Log();
}

// A repository with one model that loads and one whose config does not parse.
class GoodAndBrokenRepository : public testing::TempRepository {
 public:
  GoodAndBrokenRepository() {
    CopyBundled("simple");
    Add("broken", "backend: \"simple\" input [ { name: ");
  }
};

// grpc.health.v1.Health/Check of the overall service (""): true SERVING, false NOT_SERVING.
std::optional<bool> HealthServing(const std::string& address) {
  absl::StatusOr<std::string> bytes = testing::GrpcHealthCheck(address);
  if (!bytes.ok()) return std::nullopt;
  if (*bytes == std::string("\x08\x01", 2)) return true;
  if (*bytes == std::string("\x08\x02", 2)) return false;
  return std::nullopt;
}

// gRPC ServerReady, HTTP /v2/health/ready and the gRPC health service, which must agree.
std::optional<bool> Ready(const testing::ServerProcess& server) {
  auto client = client::InferenceClient::Create(server.address());
  if (!client.ok()) return std::nullopt;
  absl::StatusOr<bool> grpc_ready = (*client)->ServerReady();
  const int http_status = testing::HttpGet(server.http_port(), "/v2/health/ready").status;
  const std::optional<bool> health = HealthServing(server.address());
  if (!grpc_ready.ok() || (http_status == 200) != *grpc_ready || health != *grpc_ready) {
    ADD_FAILURE() << "readiness disagrees: ServerReady "
                  << (grpc_ready.ok() ? (*grpc_ready ? "true" : "false") : "error") << ", HTTP "
                  << http_status << ", health service "
                  << (health.has_value() ? (*health ? "SERVING" : "NOT_SERVING") : "error");
    return std::nullopt;
  }
  return *grpc_ready;
}

// Issue 34: with a model failed, the server reported ready. Triton's --strict-readiness (default
// true): ready only while every model it was asked to load is ready; false: ready once started.
TEST(OperatorIntegrationTest, StrictReadinessNeedsEveryModelReady) {
  GoodAndBrokenRepository repository;
  auto strict = testing::ServerProcess::Start({"--model-repository=" + repository.path()});
  ASSERT_TRUE(strict.ok()) << strict.status();
  EXPECT_EQ(Ready(**strict), std::optional<bool>(false)) << (*strict)->Log();
  EXPECT_THAT((*strict)->Log(), HasSubstr("server started, not ready"));
  // Not ready, but live, and the good model serves.
  auto client = client::InferenceClient::Create((*strict)->address());
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->ServerLive().value_or(false));
  EXPECT_TRUE((*client)->ModelReady("simple").value_or(false));
  auto code = (*strict)->Stop();
  EXPECT_TRUE(code.ok() && *code == 0) << (*strict)->Log();

  auto lenient = testing::ServerProcess::Start(
      {"--model-repository=" + repository.path(), "--strict-readiness=false"});
  ASSERT_TRUE(lenient.ok()) << lenient.status();
  EXPECT_EQ(Ready(**lenient), std::optional<bool>(true)) << (*lenient)->Log();
  EXPECT_THAT((*lenient)->Log(), HasSubstr("server ready"));
  code = (*lenient)->Stop();
  EXPECT_TRUE(code.ok() && *code == 0) << (*lenient)->Log();
}

// Under strict readiness, readiness follows the models: unloading the failed one (explicit model
// control) makes the server ready, loading it again makes it not ready.
TEST(OperatorIntegrationTest, StrictReadinessFollowsLoadsAndUnloads) {
  GoodAndBrokenRepository repository;
  auto server = testing::ServerProcess::Start({"--model-repository=" + repository.path(),
                                               "--model-control-mode=explicit",
                                               "--load-model=simple", "--load-model=broken"});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(Ready(**server), std::optional<bool>(false));
  auto client = client::InferenceClient::Create((*server)->address());
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->UnloadModel("broken").ok());
  EXPECT_EQ(Ready(**server), std::optional<bool>(true));
  EXPECT_FALSE((*client)->LoadModel("broken").ok());
  EXPECT_EQ(Ready(**server), std::optional<bool>(false));
  auto code = (*server)->Stop();
  EXPECT_TRUE(code.ok() && *code == 0) << (*server)->Log();
}

// Issue 34: a model whose config does not parse answered NOT_FOUND "unknown model", its reason only
// in the log. It answers UNAVAILABLE with the reason on gRPC and HTTP (503), the repository index
// lists it UNAVAILABLE with the reason on both, the state gauge shows it, and the log names it.
TEST(OperatorIntegrationTest, ABrokenModelIsUnavailableWithItsReasonEverywhere) {
  GoodAndBrokenRepository repository;
  auto server = testing::ServerProcess::Start({"--model-repository=" + repository.path()});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = client::InferenceClient::Create((*server)->address());
  ASSERT_TRUE(client.ok()) << client.status();

  inference::ModelInferRequest request;
  request.set_model_name("broken");
  auto* input = request.add_inputs();
  input->set_name("INPUT0");
  input->set_datatype("INT32");
  input->add_shape(1);
  input->add_shape(16);
  for (int i = 0; i < 16; ++i) input->mutable_contents()->add_int_contents(i);
  client::InferResult result = (*client)->Infer(request);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("config.pbtxt"));

  auto http = testing::Connect(**server);
  ASSERT_NE(http, nullptr);
  client::HttpReply reply =
      testing::Call(*http, "POST", "/v2/models/broken/infer", testing::SimpleJson().dump());
  EXPECT_EQ(reply.status, 503) << reply.body;
  EXPECT_THAT(testing::ErrorOf(reply), HasSubstr("config.pbtxt"));

  auto index = (*client)->RepositoryIndex();
  ASSERT_TRUE(index.ok()) << index.status();
  bool listed = false;
  for (const auto& model : index->models()) {
    if (model.name() != "broken") continue;
    listed = true;
    EXPECT_EQ(model.state(), "UNAVAILABLE");
    EXPECT_THAT(model.reason(), HasSubstr("config.pbtxt"));
  }
  EXPECT_TRUE(listed) << index->DebugString();
  reply = testing::Call(*http, "POST", "/v2/repository/index", "{}");
  ASSERT_EQ(reply.status, 200) << reply.body;
  bool listed_http = false;
  for (const nlohmann::json& model : testing::Parse(reply)) {
    if (model["name"] != "broken") continue;
    listed_http = true;
    EXPECT_EQ(model["state"], "UNAVAILABLE");
    EXPECT_THAT(model["reason"].get<std::string>(), HasSubstr("config.pbtxt"));
  }
  EXPECT_TRUE(listed_http) << reply.body;

  // The state gauge: one-hot per model version, the failed model included.
  const std::string m = R"(sluice_model_state{model="broken",version="",state=")";
  EXPECT_EQ(testing::ScrapeValue((*server)->metrics_port(), m + R"(unavailable"})"), 1);
  EXPECT_EQ(testing::ScrapeValue((*server)->metrics_port(), m + R"(ready"})"), 0);
  EXPECT_EQ(testing::ScrapeValue((*server)->metrics_port(),
                                 R"(sluice_model_state{model="simple",version="1",state="ready"})"),
            1);
  EXPECT_THAT((*server)->Log(), HasSubstr("model 'broken' failed to load: "));
  EXPECT_THAT((*server)->Log(), HasSubstr("1 model(s) failed to load: broken"));
  auto code = (*server)->Stop();
  EXPECT_TRUE(code.ok() && *code == 0) << (*server)->Log();
}

// Issue 34: `--load-model nosuch` logged "1 model(s) failed to load; see RepositoryIndex" while the
// index did not list the name. The log names it with the reason, and the index lists it.
TEST(OperatorIntegrationTest, ALoadModelWithNoFolderIsNamedWithItsReason) {
  auto server = testing::ServerProcess::Start(
      {"--model-repository=" + testing::BundledModelRepository(), "--model-control-mode=explicit",
       "--load-model=simple", "--load-model=nosuch"});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string log = (*server)->Log();
  EXPECT_THAT(log, HasSubstr("model 'nosuch' failed to load: model 'nosuch' has no folder in the "
                             "repository"));
  EXPECT_THAT(log, HasSubstr("1 model(s) failed to load: nosuch"));
  auto client = client::InferenceClient::Create((*server)->address());
  ASSERT_TRUE(client.ok()) << client.status();
  auto index = (*client)->RepositoryIndex();
  ASSERT_TRUE(index.ok()) << index.status();
  bool listed = false;
  for (const auto& model : index->models()) {
    if (model.name() != "nosuch") continue;
    listed = true;
    EXPECT_EQ(model.state(), "UNAVAILABLE");
    EXPECT_THAT(model.reason(), HasSubstr("has no folder"));
  }
  EXPECT_TRUE(listed) << index->DebugString();
  EXPECT_EQ(Ready(**server), std::optional<bool>(false));
  auto code = (*server)->Stop();
  EXPECT_TRUE(code.ok() && *code == 0) << (*server)->Log();
}

// Issue 34: without --model-repository the server serves the source tree's models/ from any
// folder, silently. One warning line says which folder, and how to choose another; none when the
// flag (or its environment variable) is given.
TEST(OperatorIntegrationTest, TheDefaultRepositoryIsNamedAtStart) {
  auto implicit = testing::ServerProcess::Start({});
  ASSERT_TRUE(implicit.ok()) << implicit.status();
  EXPECT_THAT((*implicit)->Log(), HasSubstr("no --model-repository given: serving the bundled "
                                            "example models in "));
  EXPECT_THAT((*implicit)->Log(), HasSubstr("choose another folder with --model-repository="));
  auto code = (*implicit)->Stop();
  EXPECT_TRUE(code.ok() && *code == 0) << (*implicit)->Log();

  auto given =
      testing::ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository()});
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_THAT((*given)->Log(), Not(HasSubstr("no --model-repository given")));
  code = (*given)->Stop();
  EXPECT_TRUE(code.ok() && *code == 0) << (*given)->Log();
}

}  // namespace
}  // namespace sluice
