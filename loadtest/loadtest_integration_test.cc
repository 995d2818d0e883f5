// sluice-loadtest end to end: the binary against a real sluice-server started by the test, and
// the echo server in process.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/inference_client.h"
#include "client/random_input.h"
#include "client/tensor_codec.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "loadtest/echo_service.h"
#include "nlohmann/json.hpp"
#include "tests/integration/server_process.h"
#include "tests/support/http_get.h"

namespace sluice::loadtest {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct ToolRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs sluice-loadtest with `args`, capturing its output.
ToolRun RunLoadTest(const std::vector<std::string>& args) {
  static int counter = 0;
  const std::string base =
      absl::StrCat(::testing::TempDir(), "loadtest_", getpid(), "_", counter++);
  std::string command = SLUICE_LOADTEST_BINARY;
  for (const std::string& arg : args) absl::StrAppend(&command, " '", arg, "'");
  absl::StrAppend(&command, " --no-progress >", base, ".out 2>", base, ".err");
  const int status = std::system(command.c_str());
  ToolRun run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = ReadAll(base + ".out");
  run.err = ReadAll(base + ".err");
  return run;
}

int64_t SuccessCount(client::InferenceClient& client, const std::string& model) {
  absl::StatusOr<inference::ModelStatisticsResponse> stats = client.ModelStatistics(model);
  EXPECT_TRUE(stats.ok()) << stats.status();
  int64_t count = 0;
  if (stats.ok()) {
    for (const auto& s : stats->model_stats()) {
      count += static_cast<int64_t>(s.inference_stats().success().count());
    }
  }
  return count;
}

class LoadTestAgainstSluice : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<testing::ServerProcess>> server =
        testing::ServerProcess::Start({"--model-repository", testing::BundledModelRepository(),
                                       "--model-control-mode=explicit", "--load-model=identity"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    absl::StatusOr<std::unique_ptr<client::InferenceClient>> client =
        client::InferenceClient::Create(server_->address());
    ASSERT_TRUE(client.ok());
    client_ = *std::move(client);
  }

  std::unique_ptr<testing::ServerProcess> server_;
  std::unique_ptr<client::InferenceClient> client_;
};

TEST_F(LoadTestAgainstSluice, ClosedLoopSweepWritesCsvJsonAndHtmlThatAgreeWithTheServer) {
  const std::string base = absl::StrCat(::testing::TempDir(), "sweep_", getpid());
  const int64_t before = SuccessCount(*client_, "identity");
  ToolRun run = RunLoadTest({"-m",
                             "identity",
                             "-u",
                             server_->address(),
                             "--concurrency",
                             "1:4:x4",
                             "--shape",
                             "INPUT0:256",
                             "--warmup-ms",
                             "200",
                             "--window-ms",
                             "300",
                             "--max-windows",
                             "3",
                             "--csv",
                             base + ".csv",
                             "--json",
                             base + ".json",
                             "--report",
                             base + ".html"});
  const int64_t after = SuccessCount(*client_, "identity");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("concurrency"));
  EXPECT_THAT(run.out, HasSubstr("INPUT0 FP32 [1,256]"));

  // JSON: every level measured, and the run's success count is the server's.
  const nlohmann::json doc = nlohmann::json::parse(ReadAll(base + ".json"));
  ASSERT_EQ(doc["levels"].size(), 2u);
  EXPECT_EQ(doc["levels"][0]["concurrency"], 1);
  EXPECT_EQ(doc["levels"][1]["concurrency"], 4);
  for (const nlohmann::json& level : doc["levels"]) {
    EXPECT_GT(level["throughput_rps"].get<double>(), 0);
    EXPECT_GT(level["latency_us"]["p99"].get<double>(), 0);
    EXPECT_GE(level["latency_us"]["max"].get<double>(), level["latency_us"]["p50"].get<double>());
    EXPECT_EQ(level["failed"], 0);
    ASSERT_TRUE(level["server"].is_object());
    EXPECT_GT(level["server"]["requests"].get<int64_t>(), 0);
    EXPECT_GT(level["server"]["total_us"].get<double>(), 0);
  }
  EXPECT_EQ(doc["totals"]["failed"], 0);
  EXPECT_EQ(doc["totals"]["succeeded"].get<int64_t>(), after - before);
  EXPECT_EQ(doc["config"]["request_bytes"], 1024);

  // CSV: a header and one row per level, all with the same number of fields.
  std::vector<std::string> lines = absl::StrSplit(ReadAll(base + ".csv"), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[0], StartsWith("concurrency,request_rate,mode,"));
  const std::vector<std::string> header = absl::StrSplit(lines[0], ',');
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> fields = absl::StrSplit(lines[i], ',');
    EXPECT_EQ(fields.size(), header.size()) << lines[i];
  }
  EXPECT_THAT(lines[1], StartsWith("1,0,async,1,"));

  // HTML: one self-contained document with the two charts.
  const std::string html = ReadAll(base + ".html");
  EXPECT_THAT(html, StartsWith("<!DOCTYPE html>"));
  EXPECT_THAT(html, HasSubstr("<svg"));
  EXPECT_THAT(html, EndsWith("</html>\n"));
  EXPECT_THAT(html, ::testing::Not(HasSubstr("<script")));
}

TEST_F(LoadTestAgainstSluice, OpenLoopSendsTheRequestedRate) {
  const std::string json_path = absl::StrCat(::testing::TempDir(), "rate_", getpid(), ".json");
  const int64_t before = SuccessCount(*client_, "identity");
  ToolRun run = RunLoadTest({"-m", "identity", "-u", server_->address(), "--request-rate", "200",
                             "--warmup-ms", "200", "--window-ms", "1000", "--max-windows", "2",
                             "--json", json_path});
  const int64_t after = SuccessCount(*client_, "identity");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const nlohmann::json doc = nlohmann::json::parse(ReadAll(json_path));
  ASSERT_EQ(doc["levels"].size(), 1u);
  const nlohmann::json& level = doc["levels"][0];
  EXPECT_EQ(level["request_rate"], 200.0);
  EXPECT_EQ(level["windows_run"], 2);
  EXPECT_NEAR(level["sent_rps"].get<double>(), 200.0, 200.0 * 0.05);
  // Answers follow the sends (a looser bound: an answer may land in the window after its send).
  EXPECT_NEAR(level["throughput_rps"].get<double>(), 200.0, 200.0 * 0.10);
  EXPECT_EQ(level["skipped"], 0);
  EXPECT_EQ(doc["totals"]["succeeded"].get<int64_t>(), after - before);
  EXPECT_THAT(run.out, HasSubstr("open loop"));
}

TEST_F(LoadTestAgainstSluice, SyncAndStreamModesAgreeWithTheServer) {
  for (const char* mode : {"sync", "stream"}) {
    const std::string json_path =
        absl::StrCat(::testing::TempDir(), "mode_", mode, "_", getpid(), ".json");
    const int64_t before = SuccessCount(*client_, "identity");
    ToolRun run = RunLoadTest({"-m", "identity", "-u", server_->address(), "--mode", mode,
                               "--concurrency", "4", "--batch-size", "2", "--warmup-ms", "100",
                               "--window-ms", "250", "--max-windows", "3", "--json", json_path});
    const int64_t after = SuccessCount(*client_, "identity");
    ASSERT_EQ(run.exit_code, 0) << mode << "\n" << run.out << run.err;
    const nlohmann::json doc = nlohmann::json::parse(ReadAll(json_path));
    EXPECT_EQ(doc["config"]["mode"], mode);
    EXPECT_EQ(doc["totals"]["failed"], 0) << mode;
    EXPECT_EQ(doc["totals"]["succeeded"].get<int64_t>(), after - before) << mode;
    const nlohmann::json& level = doc["levels"][0];
    EXPECT_NEAR(level["inferences_per_s"].get<double>(), 2 * level["throughput_rps"].get<double>(),
                1e-6);
  }
}

// --shared-memory system (perf_analyzer's mode): every request succeeds through the regions the
// load tester registers, the output region is too small to be refused as it should be, and the
// regions are unregistered when the run ends.
TEST_F(LoadTestAgainstSluice, SharedMemorySystemMode) {
  const std::string json_path = absl::StrCat(::testing::TempDir(), "shm_", getpid(), ".json");
  const int64_t before = SuccessCount(*client_, "identity");
  ToolRun run = RunLoadTest({"-m",
                             "identity",
                             "-u",
                             server_->address(),
                             "--shape",
                             "INPUT0:4096",
                             "--shared-memory",
                             "system",
                             "--output-shared-memory-size",
                             "16384",
                             "--concurrency",
                             "4",
                             "--warmup-ms",
                             "100",
                             "--window-ms",
                             "250",
                             "--max-windows",
                             "2",
                             "--json",
                             json_path});
  const int64_t after = SuccessCount(*client_, "identity");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("system shared memory: inputs 16384 B"));
  const nlohmann::json doc = nlohmann::json::parse(ReadAll(json_path));
  EXPECT_EQ(doc["totals"]["failed"], 0);
  EXPECT_EQ(doc["totals"]["succeeded"].get<int64_t>(), after - before);
  // Gone from the server afterwards.
  auto stub = inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  inference::SystemSharedMemoryStatusRequest request;
  inference::SystemSharedMemoryStatusResponse status;
  grpc::ClientContext context;
  ASSERT_TRUE(stub->SystemSharedMemoryStatus(&context, request, &status).ok());
  EXPECT_TRUE(status.regions().empty());

  // An output region smaller than the output: the probe request fails with the server's reason.
  ToolRun small = RunLoadTest({"-m", "identity", "-u", server_->address(), "--shape", "INPUT0:4096",
                               "--shared-memory", "system", "--output-shared-memory-size", "1024"});
  EXPECT_EQ(small.exit_code, 1);
  EXPECT_THAT(small.err, HasSubstr("shared_memory_byte_size in region"));
}

TEST_F(LoadTestAgainstSluice, UnknownModelIsAClearError) {
  ToolRun run = RunLoadTest({"-m", "no_such_model", "-u", server_->address()});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_THAT(run.err, HasSubstr("model 'no_such_model' is not known to the server"));
  EXPECT_THAT(run.err, HasSubstr("identity"));  // the ready models are listed
}

TEST(LoadTestErrors, ServerDownIsAClearError) {
  ToolRun run = RunLoadTest({"-m", "identity", "-u", "127.0.0.1:1", "--timeout-ms", "2000"});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_THAT(run.err, HasSubstr("cannot reach a KServe v2 server at 127.0.0.1:1"));
}

TEST(LoadTestErrors, UsageErrors) {
  EXPECT_EQ(RunLoadTest({"-m", "identity", "--concurrency", "4:1"}).exit_code, 2);
  EXPECT_EQ(RunLoadTest({"-m", "identity", "--request-rate", "10", "--mode", "sync"}).exit_code, 2);
  EXPECT_EQ(RunLoadTest({"-m", "identity", "--concurrency", "2", "--request-rate", "10"}).exit_code,
            2);
}

// ---- Ragged traffic (--seq-len MIN:MAX) against the real encoder --------------------------------

class LoadTestRagged : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<testing::ServerProcess>> server =
        testing::ServerProcess::Start({"--model-repository", testing::BundledModelRepository(),
                                       "--model-control-mode=explicit", "--load-model=embedder"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_NE(server_->metrics_port(), 0);
  }

  // Real tokens the server has batched for `embedder` (every token of every request it ran).
  double ServerTokens() const {
    return testing::ScrapeValue(server_->metrics_port(),
                                R"(sluice_batch_tokens_sum{model="embedder",version="1"})")
        .value_or(-1);
  }

  std::unique_ptr<testing::ServerProcess> server_;
};

// Every request of a run has the length its seed and number give, so the server's count of real
// tokens grows by exactly the probe's (the longest length) plus DrawLength summed over the
// requests sent, and the load tester's own token count agrees.
TEST_F(LoadTestRagged, EveryRequestCarriesTheLengthItsSeedAndNumberGive) {
  const std::string json_path = absl::StrCat(::testing::TempDir(), "ragged_", getpid(), ".json");
  const double before = ServerTokens();
  ASSERT_GE(before, 0);
  constexpr int kRequests = 300;
  ToolRun run = RunLoadTest({"-m",
                             "embedder",
                             "-u",
                             server_->address(),
                             "--seq-len",
                             "8:128",
                             "--vocab-size",
                             "4096",
                             "--seed",
                             "11",
                             "--concurrency",
                             "8",
                             "--max-requests",
                             absl::StrCat(kRequests),
                             "--warmup-ms",
                             "50",
                             "--window-ms",
                             "20000",
                             "--max-windows",
                             "1",
                             "--json",
                             json_path});
  // --max-requests ends the run: exit status 3, the level still reported.
  ASSERT_EQ(run.exit_code, 3) << run.out << run.err;
  int64_t expected = 128;  // the probe
  int64_t shortest = 1 << 30, longest = 0;
  for (uint64_t k = 0; k < kRequests; ++k) {
    const int64_t length = client::DrawLength(client::LengthRange{8, 128}, 11, k);
    expected += length;
    shortest = std::min(shortest, length);
    longest = std::max(longest, length);
  }
  ASSERT_LT(shortest, 16);  // the draw spans the range (else this test proves little)
  ASSERT_GT(longest, 120);
  // The server's histogram is updated when a batch is dispatched: before its answers.
  EXPECT_EQ(ServerTokens() - before, static_cast<double>(expected));
  const nlohmann::json doc = nlohmann::json::parse(ReadAll(json_path));
  EXPECT_EQ(doc["totals"]["failed"], 0);
  EXPECT_EQ(doc["totals"]["succeeded"], kRequests + 1);
  EXPECT_EQ(doc["totals"]["tokens"], expected);
  EXPECT_EQ(doc["config"]["counts_tokens"], true);
  const nlohmann::json& level = doc["levels"][0];
  EXPECT_GT(level["tokens_per_s"].get<double>(), 8 * level["throughput_rps"].get<double>());
  EXPECT_LT(level["tokens_per_s"].get<double>(), 128 * level["throughput_rps"].get<double>());
  EXPECT_THAT(run.out, HasSubstr("input_ids INT64 [1,8..128]"));
  EXPECT_THAT(run.out, HasSubstr("uniform over [8, 128] (seed 11)"));
  EXPECT_THAT(run.out, HasSubstr("tokens/s"));
}

// A range whose longest length the model refuses fails at the probe with the server's reason.
TEST_F(LoadTestRagged, ALengthAboveTheModelsLimitFailsAtOnce) {
  ToolRun run = RunLoadTest(
      {"-m", "embedder", "-u", server_->address(), "--seq-len", "8:200", "--concurrency", "2"});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_THAT(run.err, HasSubstr("[1,200]"));
  EXPECT_THAT(run.err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(run.err, HasSubstr("128"));  // the model's limit, named by the server
}

TEST(LoadTestErrors, SequenceLengthRangeUsageErrors) {
  for (const char* bad : {"9:8", "0:8", "8:", "x"}) {
    ToolRun run = RunLoadTest({"-m", "embedder", "--seq-len", bad});
    EXPECT_EQ(run.exit_code, 2) << bad;
    EXPECT_THAT(run.err, HasSubstr("--seq-len")) << bad;
  }
  ToolRun http =
      RunLoadTest({"-m", "embedder", "--seq-len", "8:64", "--protocol", "http", "--mode", "sync"});
  EXPECT_EQ(http.exit_code, 2);
  EXPECT_THAT(http.err, HasSubstr("needs random or zero inputs over gRPC"));
}

// ---- The echo server ----------------------------------------------------------------------------

class EchoServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    address_ = absl::StrCat("127.0.0.1:", port_);
    client_ = *client::InferenceClient::Create(address_);
  }
  void TearDown() override {
    client_.reset();
    if (server_ != nullptr) server_->Shutdown();
  }

  EchoService service_{EchoModelOptions{}};
  int port_ = 0;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<client::InferenceClient> client_;
};

TEST_F(EchoServerTest, AnswersModelInferWithItsInputs) {
  inference::ModelInferRequest request;
  request.set_model_name("identity");
  request.set_id("7");
  ASSERT_TRUE(client::AddInput(request, "INPUT0", {1, 4}, std::vector<float>{1, -2, 3.5, 4}).ok());
  client::InferResult response = client_->Infer(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->id(), "7");
  ASSERT_EQ(response->raw_output_contents_size(), 1);
  EXPECT_EQ(response->raw_output_contents(0), request.raw_input_contents(0));
  absl::StatusOr<client::OutputTensor> output = client::DecodeOutput(*response, "OUTPUT0");
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_THAT(*output->As<float>(), ::testing::ElementsAre(1, -2, 3.5, 4));
}

TEST_F(EchoServerTest, ServesMetadataForAnyModelAndStreams) {
  absl::StatusOr<inference::ModelMetadataResponse> metadata = client_->ModelMetadata("whatever");
  ASSERT_TRUE(metadata.ok()) << metadata.status();
  EXPECT_EQ(metadata->name(), "whatever");
  EXPECT_EQ(metadata->inputs(0).name(), "INPUT0");
  EXPECT_EQ(metadata->outputs(0).name(), "OUTPUT0");
  EXPECT_THAT(metadata->inputs(0).shape(), ::testing::ElementsAre(-1, -1));
  absl::StatusOr<inference::ModelConfig> config = client_->ModelConfig("whatever");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->max_batch_size(), 64);
  EXPECT_EQ(config->input(0).data_type(), inference::TYPE_FP32);
  EXPECT_TRUE(*client_->ModelReady("whatever"));
  EXPECT_TRUE(*client_->ServerReady());
  absl::StatusOr<inference::ModelStatisticsResponse> stats = client_->ModelStatistics("whatever");
  ASSERT_TRUE(stats.ok());
  ASSERT_EQ(stats->model_stats_size(), 1);
  EXPECT_EQ(stats->model_stats(0).inference_stats().success().count(), 0u);

  // A stream echoes every request, each answer carrying its id.
  absl::Mutex mu;
  std::vector<std::string> ids;
  auto stream = client_->StartStream([&](client::InferResult result) {
    absl::MutexLock lock(&mu);
    ids.push_back(result.ok() ? result->id() : "error");
  });
  ASSERT_TRUE(stream.ok());
  for (int i = 0; i < 50; ++i) {
    inference::ModelInferRequest request;
    request.set_model_name("whatever");
    request.set_id(absl::StrCat(i));
    ASSERT_TRUE(client::AddInput(request, "INPUT0", {1, 2}, std::vector<float>{1, 2}).ok());
    ASSERT_TRUE((*stream)->Write(std::move(request)).ok());
  }
  ASSERT_TRUE((*stream)->Finish().ok());
  absl::MutexLock lock(&mu);
  ASSERT_EQ(ids.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(ids[i], absl::StrCat(i));
}

// The binary: --port 0 logs the port it bound (as sluice-server does), it answers, and SIGTERM
// stops it with exit status 0.
TEST(EchoServerBinaryTest, LogsItsPortAnswersAndStopsOnSigterm) {
  const std::string log_path = absl::StrCat(::testing::TempDir(), "echo_server_", getpid(), ".log");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDERR_FILENO);
      dup2(fd, STDOUT_FILENO);
      close(fd);
    }
    execl(SLUICE_ECHO_SERVER_BINARY, SLUICE_ECHO_SERVER_BINARY, "--port", "0", "--input-shape",
          "-1,8", static_cast<char*>(nullptr));
    _exit(127);
  }
  int port = 0;
  const std::regex port_re("grpc_port=([0-9]+)");
  for (int i = 0; i < 500 && port == 0; ++i) {
    std::smatch match;
    const std::string log = ReadAll(log_path);
    if (std::regex_search(log, match, port_re) &&
        log.find("echo server ready") != std::string::npos) {
      port = std::stoi(match[1]);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ASSERT_GT(port, 0) << ReadAll(log_path);
  {
    auto client = *client::InferenceClient::Create(absl::StrCat("127.0.0.1:", port));
    absl::StatusOr<inference::ModelMetadataResponse> metadata = client->ModelMetadata("m");
    ASSERT_TRUE(metadata.ok()) << metadata.status();
    EXPECT_THAT(metadata->inputs(0).shape(), ::testing::ElementsAre(-1, 8));
    inference::ModelInferRequest request;
    request.set_model_name("m");
    ASSERT_TRUE(client::AddInput(request, "INPUT0", {1, 2}, std::vector<int32_t>{5, 6}).ok());
    client::InferResult response = client->Infer(request);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->raw_output_contents(0), request.raw_input_contents(0));
  }
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  unlink(log_path.c_str());
}

TEST_F(EchoServerTest, TheLoadTesterDrivesIt) {
  const std::string json_path = absl::StrCat(::testing::TempDir(), "echo_", getpid(), ".json");
  ToolRun run = RunLoadTest({"-m", "identity", "-u", address_, "--mode", "stream", "--concurrency",
                             "8", "--shape", "INPUT0:1024", "--warmup-ms", "100", "--window-ms",
                             "250", "--max-windows", "3", "--json", json_path});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const nlohmann::json doc = nlohmann::json::parse(ReadAll(json_path));
  EXPECT_EQ(doc["totals"]["failed"], 0);
  EXPECT_GT(doc["levels"][0]["throughput_rps"].get<double>(), 0);
  EXPECT_EQ(doc["config"]["request_bytes"], 4096);
  EXPECT_EQ(doc["levels"][0]["server"]["requests"], 0);  // the echo server keeps no statistics
}

}  // namespace
}  // namespace sluice::loadtest
