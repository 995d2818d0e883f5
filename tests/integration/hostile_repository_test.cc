// Issue 17 items 3, 7, 8 and 10 through the real server process: a hostile or broken model
// repository (and over-long names from a client) must fail the one model or the one call, never
// the server, and SIGTERM must stop it within its exit timeout whatever a load is doing.
// Loopback only, port 0; each test runs in a few seconds and allocates nothing large.

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/inference_client.h"
#include "gtest/gtest.h"
#include "tests/integration/server_process.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using client::InferenceClient;
using testing::ServerProcess;
using Clock = std::chrono::steady_clock;

std::string IdentityConfig(const std::string& dims, const std::string& extra = "") {
  return absl::StrCat(
      "backend: \"identity\"\n", "input [{ name: \"IN\" data_type: TYPE_FP32 dims: [ ", dims,
      " ] }]\n", "output [{ name: \"OUT\" data_type: TYPE_FP32 dims: [ ", dims, " ] }]\n", extra);
}

class HostileRepositoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            absl::StrCat("hostile_repo_", getpid(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::remove_all(outside());
    fs::create_directories(root_);
  }
  void TearDown() override {
    fs::remove_all(root_);
    fs::remove_all(outside());
  }
  fs::path outside() const { return root_.string() + "_outside"; }

  void WriteModel(const std::string& name, const std::string& config,
                  std::vector<std::string> versions = {"1"}) {
    fs::create_directories(root_ / name);
    std::ofstream(root_ / name / "config.pbtxt") << config;
    for (const std::string& v : versions) fs::create_directories(root_ / name / v);
  }

  absl::StatusOr<std::unique_ptr<ServerProcess>> Start(std::vector<std::string> args) {
    args.push_back("--model-repository=" + root_.string());
    args.push_back("--allow-metrics=false");
    return ServerProcess::Start(std::move(args), std::chrono::seconds(20));
  }

  static std::unique_ptr<InferenceClient> Client(const ServerProcess& server,
                                                 int64_t timeout_ms = 10000) {
    client::ClientOptions options;
    options.timeout_ms = timeout_ms;
    return *InferenceClient::Create(server.address(), options);
  }

  static std::map<std::string, inference::RepositoryIndexResponse::ModelIndex> Index(
      InferenceClient& client) {
    std::map<std::string, inference::RepositoryIndexResponse::ModelIndex> index;
    auto response = client.RepositoryIndex();
    EXPECT_TRUE(response.ok()) << response.status();
    if (response.ok()) {
      for (const auto& model : response->models()) index[model.name()] = model;
    }
    return index;
  }

  fs::path root_;
};

// Item 3: configs that asked for terabytes (dims [2^40]) or 3,000 threads (count 1500) ended the
// process with std::bad_alloc / std::system_error: at start in the default mode (a crash loop),
// and in explicit mode one RepositoryModelLoad took every model down.
TEST_F(HostileRepositoryTest, Item3OversizedConfigsFailAloneAtStartAndOnLoad) {
  WriteModel("good", IdentityConfig("4"));
  WriteModel("huge", IdentityConfig("1099511627776"));
  WriteModel("many", IdentityConfig("4", "instance_group [{ count: 1500 }]"));
  {
    auto server = Start({});
    ASSERT_TRUE(server.ok()) << server.status();
    auto client = Client(**server);
    auto index = Index(*client);
    EXPECT_EQ(index["good"].state(), "READY");
    EXPECT_EQ(index["huge"].state(), "UNAVAILABLE");
    EXPECT_NE(index["huge"].reason().find("--max-tensor-bytes"), std::string::npos)
        << index["huge"].reason();
    EXPECT_NE(index["many"].reason().find("--max-model-instances"), std::string::npos)
        << index["many"].reason();
    EXPECT_EQ(*(*server)->Stop(std::chrono::seconds(10)), 0);
  }
  auto server = Start({"--model-control-mode=explicit", "--load-model=good"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Client(**server);
  absl::Status huge = client->LoadModel("huge");
  EXPECT_TRUE(absl::IsInvalidArgument(huge)) << huge;
  EXPECT_NE(huge.message().find("input 'IN'"), std::string::npos) << huge;
  EXPECT_TRUE(absl::IsInvalidArgument(client->LoadModel("many")));
  EXPECT_TRUE(*client->ServerLive());
  EXPECT_TRUE(*client->ModelReady("good"));
  EXPECT_EQ(*(*server)->Stop(std::chrono::seconds(10)), 0);
}

// Item 7: a 16 KB model name came back as RESOURCE_EXHAUSTED (the echoing message no longer fit
// the client's header limit), and a config's huge `name` made every RepositoryIndex huge.
TEST_F(HostileRepositoryTest, Item7LongNamesKeepTheirCodeAndSmallMessages) {
  WriteModel("good", IdentityConfig("4"));
  WriteModel("named",
             IdentityConfig("4", absl::StrCat("name: \"", std::string(900000, 'n'), "\"")));
  auto server = Start({});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Client(**server);
  const std::string huge(20000, 'm');  // 16 KB and more turned NOT_FOUND into RESOURCE_EXHAUSTED
  auto metadata = client->ModelMetadata(huge);
  EXPECT_TRUE(absl::IsNotFound(metadata.status())) << metadata.status().code();
  EXPECT_LT(metadata.status().message().size(), 5000u);
  inference::ModelInferRequest request;
  request.set_model_name(huge);
  auto infer = client->Infer(request);
  EXPECT_TRUE(absl::IsInvalidArgument(infer.status())) << infer.status().code();
  EXPECT_NE(infer.status().message().find("truncated: 20000 bytes"), std::string::npos);
  auto index = client->RepositoryIndex();
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_LT(index->ByteSizeLong(), 10000u);
  EXPECT_EQ(*(*server)->Stop(std::chrono::seconds(10)), 0);
}

// Item 8: a config.pbtxt that is a FIFO blocked the control thread for good (every later load
// waited, SIGTERM did not stop the server); abandoned loads still ran; the queue had no bound.
TEST_F(HostileRepositoryTest, Item8ControlCallsAreBoundedCancellableAndExitHoldsItsTimeout) {
  WriteModel("good", IdentityConfig("4"));
  fs::create_directories(root_ / "fifo" / "1");
  ASSERT_EQ(mkfifo((root_ / "fifo" / "config.pbtxt").c_str(), 0600), 0);
  // Its warm-up runs one batch that sleeps: a load that keeps the control thread busy.
  WriteModel("slow", IdentityConfig("4", R"pb(parameters {
                                                key: "execute_delay_ms"
                                                value { string_value: "60000" }
                                              })pb"));
  WriteModel("quick_slow", IdentityConfig("4", R"pb(parameters {
                                                      key: "execute_delay_ms"
                                                      value { string_value: "1500" }
                                                    })pb"));
  auto server = Start(
      {"--model-control-mode=explicit", "--model-control-queue-size=4", "--exit-timeout-secs=1"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Client(**server, 5000);
  const auto fifo_start = Clock::now();
  absl::Status fifo = client->LoadModel("fifo");
  EXPECT_TRUE(absl::IsInvalidArgument(fifo)) << fifo;
  EXPECT_LT(Clock::now() - fifo_start, std::chrono::seconds(3));
  EXPECT_TRUE(client->LoadModel("good").ok());

  // Abandoned calls: each gives up after 200 ms behind a 1.5 s load; none of them runs.
  std::thread busy([&] { EXPECT_TRUE(Client(**server)->LoadModel("quick_slow").ok()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto impatient = Client(**server, 200);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(impatient->LoadModel("good").code(), absl::StatusCode::kDeadlineExceeded);
  }
  busy.join();
  EXPECT_TRUE(client->LoadModel("fifo").code() == absl::StatusCode::kInvalidArgument);
  const std::string log = (*server)->Log();
  size_t good_loads = 0;
  for (size_t at = 0; (at = log.find("loading model 'good'", at)) != std::string::npos; ++at) {
    ++good_loads;
  }
  EXPECT_EQ(good_loads, 1u) << "abandoned loads ran";

  // A bounded queue behind a load that takes a minute: the overflow is answered at once.
  std::vector<std::thread> callers;
  std::vector<absl::StatusCode> codes(8, absl::StatusCode::kUnknown);
  callers.emplace_back([&] { Client(**server, 120000)->LoadModel("slow").IgnoreError(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (int i = 0; i < 8; ++i) {
    callers.emplace_back([&, i] { codes[i] = Client(**server, 120000)->LoadModel("good").code(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // SIGTERM with the control thread busy for another minute: the exit timeout (1 s) holds.
  const auto stop_start = Clock::now();
  absl::StatusOr<int> exit_code = (*server)->Stop(std::chrono::seconds(10));
  EXPECT_TRUE(exit_code.ok() && *exit_code == 0)
      << (exit_code.ok() ? absl::StrCat("exit code ", *exit_code) : exit_code.status().ToString());
  EXPECT_LT(Clock::now() - stop_start, std::chrono::seconds(5));
  // Failing, the server may still run with the callers waiting on it: end it so they return.
  if (!exit_code.ok()) (*server)->Stop(std::chrono::seconds(5), SIGKILL).IgnoreError();
  for (std::thread& caller : callers) caller.join();
  int exhausted = 0;
  for (absl::StatusCode code : codes) {
    exhausted += code == absl::StatusCode::kResourceExhausted;
    EXPECT_TRUE(code == absl::StatusCode::kResourceExhausted ||
                code == absl::StatusCode::kUnavailable)
        << absl::StatusCodeToString(code);
  }
  EXPECT_EQ(exhausted, 4);  // 8 callers, 4 may wait
}

// Item 10: symlinks out of the repository were followed (model folder, version folder, a file in
// it such as the weights); version folders "1" and "01" collapsed into one, " 1" was read as 1/.
TEST_F(HostileRepositoryTest, Item10SymlinksOutAndAmbiguousVersionsAreRefused) {
  WriteModel("good", IdentityConfig("4"));
  fs::create_directories(outside() / "model" / "1");
  std::ofstream(outside() / "model" / "config.pbtxt") << IdentityConfig("4");
  std::ofstream(outside() / "weights") << "not yours";
  fs::create_directory_symlink(outside() / "model", root_ / "linked_model");
  WriteModel("linked_version", IdentityConfig("4"), {});
  fs::create_directory_symlink(outside() / "model" / "1", root_ / "linked_version" / "1");
  WriteModel("linked_file", IdentityConfig("4"));
  fs::create_symlink(outside() / "weights", root_ / "linked_file" / "1" / "model.safetensors");
  WriteModel("zero_padded", IdentityConfig("4"), {"1", "01"});
  WriteModel("spaced", IdentityConfig("4"), {" 1"});
  // The dims-overflow error named neither the model nor the tensor.
  WriteModel("overflow", IdentityConfig("1099511627776, 1099511627776"));
  {
    auto server = Start({});
    ASSERT_TRUE(server.ok()) << server.status();
    auto client = Client(**server);
    auto index = Index(*client);
    EXPECT_EQ(index["good"].state(), "READY");
    for (const char* name : {"linked_model", "linked_version", "linked_file"}) {
      EXPECT_NE(index[name].state(), "READY") << name;
      EXPECT_NE(index[name].reason().find("outside the repository"), std::string::npos)
          << name << ": " << index[name].reason();
    }
    for (const char* name : {"zero_padded", "spaced"}) {
      EXPECT_NE(index[name].state(), "READY") << name;
      EXPECT_NE(index[name].reason().find("ambiguous"), std::string::npos)
          << name << ": " << index[name].reason();
    }
    EXPECT_NE(index["overflow"].reason().find("model 'overflow': input 'IN'"), std::string::npos)
        << index["overflow"].reason();
    EXPECT_EQ(*(*server)->Stop(std::chrono::seconds(10)), 0);
  }
  auto server = Start({"--allow-symlinks-out-of-repository=true"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto index = Index(*Client(**server));
  EXPECT_EQ(index["linked_model"].state(), "READY");
  EXPECT_EQ(index["linked_version"].state(), "READY");
  EXPECT_EQ(*(*server)->Stop(std::chrono::seconds(10)), 0);
}

}  // namespace
}  // namespace sluice
