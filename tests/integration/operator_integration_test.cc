// The first hour of an operator (issue 34): what a second server on a taken port does, and the
// statistics fields Triton's clients and dashboards read.

#include <memory>
#include <string>

#include "client/inference_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/server_process.h"
#include "tests/support/http_get.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
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

}  // namespace
}  // namespace sluice
