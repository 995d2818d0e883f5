// The executor fault path end to end (issue 4, "Faults"): the real sluice-server with the test-only
// fault hook armed (SLUICE_TEST_FAULT_INJECT), driven by the client library. The faulted batch's
// request gets INTERNAL, the model goes not ready with the reason in the repository index, its
// requests get UNAVAILABLE, the other model keeps serving, the failures show in /metrics, and a
// reload through the model-control API brings it back.

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/inference_client.h"
#include "client/tensor_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/server_process.h"
#include "tests/support/http_get.h"

namespace sluice {
namespace {

using client::AddInput;
using client::DecodeOutput;
using client::InferenceClient;
using inference::ModelInferRequest;
using ::testing::HasSubstr;
using testing::ServerProcess;

// Sets an environment variable for the servers this test starts (they inherit ours), and
// removes it again.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

// The value of the sample of `family` whose labels contain every one of `labels` (as
// `name="value"`); -1 if there is none.
double SampleValue(const std::string& exposition, const std::string& family,
                   const std::vector<std::string>& labels) {
  std::istringstream lines(exposition);
  std::string line;
  while (std::getline(lines, line)) {
    if (!absl::StartsWith(line, family + "{")) continue;
    bool all = true;
    for (const std::string& label : labels) all = all && absl::StrContains(line, label);
    double value = 0;
    if (all && absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) return value;
  }
  return -1;
}

// Polls `done` for up to 10 s: the fault marks the model not ready on the executor's thread just
// after the faulted batch was answered.
bool Eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

ModelInferRequest SimpleRequest(int32_t base) {
  ModelInferRequest request;
  request.set_model_name("simple");
  std::vector<int32_t> a(16), b(16);
  for (int i = 0; i < 16; ++i) {
    a[i] = base + i;
    b[i] = 2 * i;
  }
  EXPECT_TRUE(AddInput(request, "INPUT0", {1, 16}, a).ok());
  EXPECT_TRUE(AddInput(request, "INPUT1", {1, 16}, b).ok());
  return request;
}

// "" if `response` is simple's answer to SimpleRequest(base), else what is wrong.
std::string CheckSimple(const inference::ModelInferResponse& response, int32_t base) {
  auto sum = DecodeOutput(response, "OUTPUT0");
  auto diff = DecodeOutput(response, "OUTPUT1");
  if (!sum.ok() || !diff.ok()) return "missing output";
  auto s = sum->As<int32_t>();
  auto d = diff->As<int32_t>();
  if (!s.ok() || !d.ok() || s->size() != 16 || d->size() != 16) return "bad size";
  for (int i = 0; i < 16; ++i) {
    if ((*s)[i] != base + 3 * i || (*d)[i] != base - i) return absl::StrCat("wrong value at ", i);
  }
  return "";
}

TEST(FaultIntegrationTest, FaultFailsTheBatchMarksTheModelNotReadyAndReloadRecovers) {
  // simple's third batch faults; the hook fires once per process, so the reload stays healthy.
  ScopedEnv inject("SLUICE_TEST_FAULT_INJECT", "simple:2");
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository(),
                                      "--model-control-mode=explicit", "--load-model=simple",
                                      "--load-model=identity"});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT((*server)->Log(), HasSubstr("TEST-ONLY FAULT INJECTION ARMED"));
  auto created = InferenceClient::Create((*server)->address());
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<InferenceClient> client = *std::move(created);

  for (int32_t base : {100, 200}) {
    auto response = client->Infer(SimpleRequest(base));
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(CheckSimple(*response, base), "");
  }

  // The faulted batch: INTERNAL, naming what failed.
  auto faulted = client->Infer(SimpleRequest(300));
  EXPECT_EQ(faulted.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(faulted.status().message()),
              HasSubstr("SLUICE_TEST_FAULT_INJECT=simple:2 fired in batch 3"));

  // simple is not ready, with the reason in the repository index.
  ASSERT_TRUE(Eventually([&] { return !client->ModelReady("simple").value_or(true); }))
      << (*server)->Log();
  EXPECT_FALSE(client->ModelReady("simple", "1").value_or(true));
  auto index = client->RepositoryIndex();
  ASSERT_TRUE(index.ok()) << index.status();
  std::map<std::string, inference::RepositoryIndexResponse::ModelIndex> models;
  for (const auto& m : index->models()) models[m.name()] = m;
  EXPECT_EQ(models["simple"].state(), "UNAVAILABLE");
  EXPECT_THAT(models["simple"].reason(), HasSubstr("instance 0 faulted"));
  EXPECT_THAT(models["simple"].reason(), HasSubstr("SLUICE_TEST_FAULT_INJECT"));
  EXPECT_EQ(models["identity"].state(), "READY");

  // Its requests are refused with a clear reason; identity keeps serving.
  auto refused = client->Infer(SimpleRequest(400));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("model 'simple' version 1 is not ready: instance 0 faulted"));
  ModelInferRequest identity;
  identity.set_model_name("identity");
  ASSERT_TRUE(AddInput(identity, "INPUT0", {1, 3}, std::vector<float>{1, 2, 3}).ok());
  auto echoed = client->Infer(identity);
  ASSERT_TRUE(echoed.ok()) << echoed.status();
  auto echoed_output = DecodeOutput(*echoed, "OUTPUT0");
  ASSERT_TRUE(echoed_output.ok());
  EXPECT_EQ(echoed_output->As<float>().value_or(std::vector<float>{}),
            std::vector<float>({1, 2, 3}));
  EXPECT_TRUE(client->ModelReady("identity").value_or(false));

  // The failures are counted, by reason, in ModelStatistics and in /metrics.
  auto stats = client->ModelStatistics("simple");
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->model_stats_size(), 1);
  EXPECT_EQ(stats->model_stats(0).inference_stats().fail().count(), 2u);  // INTERNAL + UNAVAILABLE
  EXPECT_EQ(stats->model_stats(0).inference_stats().success().count(), 2u);
  ASSERT_NE((*server)->metrics_port(), 0);
  const std::string metrics = testing::HttpGet((*server)->metrics_port(), "/metrics").body;
  EXPECT_EQ(SampleValue(metrics, "sluice_inference_requests_total",
                        {"model=\"simple\"", "outcome=\"failure\"", "reason=\"internal\""}),
            1)
      << metrics;
  EXPECT_EQ(SampleValue(metrics, "sluice_inference_requests_total",
                        {"model=\"simple\"", "outcome=\"failure\"", "reason=\"unavailable\""}),
            1);

  // A reload through the model-control API recovers it.
  ASSERT_TRUE(client->LoadModel("simple").ok());
  EXPECT_TRUE(client->ModelReady("simple").value_or(false));
  index = client->RepositoryIndex();
  ASSERT_TRUE(index.ok());
  for (const auto& m : index->models()) {
    if (m.name() == "simple") {
      EXPECT_EQ(m.state(), "READY");
      EXPECT_EQ(m.reason(), "");
    }
  }
  for (int32_t base : {500, 600, 700, 800}) {
    auto response = client->Infer(SimpleRequest(base));
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(CheckSimple(*response, base), "");
  }
  EXPECT_EQ((*server)->Stop().value_or(-1), 0) << (*server)->Log();
}

// A sticky device error (engine/core/device_fault.h; injected here as cudaErrorIllegalAddress,
// which the CPU build classifies exactly as the CUDA executor classifies a real one) ends the
// process: the batch fails INTERNAL naming the code, liveness turns false, the fault is logged
// once, and the server drains and exits 3 by itself so that the orchestrator restarts it.
TEST(FaultIntegrationTest, StickyDeviceErrorDrainsAndExitsNonZero) {
  ScopedEnv inject("SLUICE_TEST_FAULT_INJECT", "simple:1:cudaErrorIllegalAddress");
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository(),
                                      "--model-control-mode=explicit", "--load-model=simple",
                                      "--load-model=identity"});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_NE((*server)->http_port(), 0);
  EXPECT_EQ(testing::HttpGet((*server)->http_port(), "/v2/health/live").status, 200);
  auto created = InferenceClient::Create((*server)->address());
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<InferenceClient> client = *std::move(created);

  auto first = client->Infer(SimpleRequest(100));
  ASSERT_TRUE(first.ok()) << first.status();
  auto faulted = client->Infer(SimpleRequest(200));
  EXPECT_EQ(faulted.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(faulted.status().message()), HasSubstr("cudaErrorIllegalAddress (700"));

  // Liveness turns false before the drain ends: this client keeps its connection open, so the
  // gRPC shutdown grace (1 s) holds the HTTP front end up long enough to see it.
  int live = 200;
  ASSERT_TRUE(Eventually([&] {
    live = testing::HttpGet((*server)->http_port(), "/v2/health/live").status;
    return live != 200;
  }));
  EXPECT_EQ(live, 400) << "0: the HTTP front end stopped before liveness was seen false";
  // The process ends by itself (signal 0 only waits), with the process-fatal exit code.
  absl::StatusOr<int> code = (*server)->Stop(std::chrono::seconds(30), /*signal=*/0);
  ASSERT_TRUE(code.ok()) << code.status() << (*server)->Log();
  EXPECT_EQ(*code, 3) << (*server)->Log();
  const std::string log = (*server)->Log();
  size_t logged = 0;
  for (size_t at = log.find("process-fatal device fault in model"); at != std::string::npos;
       at = log.find("process-fatal device fault in model", at + 1)) {
    ++logged;
  }
  EXPECT_EQ(logged, 1u) << log;
  EXPECT_THAT(log, HasSubstr("liveness and readiness are NOT_SERVING"));
}

// A recoverable device error (cudaErrorLaunchOutOfResources) faults only the instance: the model
// goes not ready, the other model and liveness are untouched, and the server stops normally.
TEST(FaultIntegrationTest, RecoverableDeviceErrorFaultsOnlyTheInstance) {
  ScopedEnv inject("SLUICE_TEST_FAULT_INJECT", "simple:0:cudaErrorLaunchOutOfResources");
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository(),
                                      "--model-control-mode=explicit", "--load-model=simple",
                                      "--load-model=identity"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto created = InferenceClient::Create((*server)->address());
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<InferenceClient> client = *std::move(created);

  auto faulted = client->Infer(SimpleRequest(100));
  EXPECT_EQ(faulted.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(faulted.status().message()),
              HasSubstr("cudaErrorLaunchOutOfResources (701, recoverable)"));
  ASSERT_TRUE(Eventually([&] { return !client->ModelReady("simple").value_or(true); }))
      << (*server)->Log();
  ModelInferRequest identity;
  identity.set_model_name("identity");
  ASSERT_TRUE(AddInput(identity, "INPUT0", {1, 3}, std::vector<float>{1, 2, 3}).ok());
  auto echoed = client->Infer(identity);
  ASSERT_TRUE(echoed.ok()) << echoed.status();
  EXPECT_TRUE(client->ServerLive().value_or(false));
  EXPECT_EQ(testing::HttpGet((*server)->http_port(), "/v2/health/live").status, 200);
  EXPECT_EQ((*server)->Stop().value_or(-1), 0) << (*server)->Log();
  EXPECT_THAT((*server)->Log(), ::testing::Not(HasSubstr("process-fatal")));
}

// A malformed spec stops the server at start-up rather than arming something unintended.
TEST(FaultIntegrationTest, MalformedInjectionSpecRefusesToStart) {
  ScopedEnv inject("SLUICE_TEST_FAULT_INJECT", "simple");
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository()});
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("<model>:<after_n_batches>"));
}

TEST(FaultIntegrationTest, UnknownCudaErrorNameRefusesToStart) {
  ScopedEnv inject("SLUICE_TEST_FAULT_INJECT", "simple:1:cudaErrorNoSuchThing");
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository()});
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()),
              HasSubstr("unknown CUDA error 'cudaErrorNoSuchThing'"));
}

}  // namespace
}  // namespace sluice
