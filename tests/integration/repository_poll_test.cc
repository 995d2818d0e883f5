// --model-control-mode=poll (issue 34 item 2): model folders dropped into a polled repository
// load, changed ones reload while the old version keeps serving, removed ones are unloaded, and a
// folder still being written waits for a stable scan instead of being loaded broken. Loopback
// servers with --repository-poll-secs=1; every wait is bounded.

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_replace.h"
#include "client/inference_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/http_integration_test_util.h"
#include "tests/integration/server_process.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ServerProcess;

constexpr auto kWait = std::chrono::seconds(20);  // several 1 s polls, on a loaded machine

std::unique_ptr<ServerProcess> StartPolling(const std::string& root) {
  auto server = ServerProcess::Start(
      {"--model-repository=" + root, "--model-control-mode=poll", "--repository-poll-secs=1"});
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// Polls `done` every 100 ms until it holds or `kWait` passes.
bool WaitFor(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

// The bundled "simple" config, named `name`, with `max_batch_size`.
std::string SimpleConfig(const std::string& name, int max_batch_size) {
  std::ifstream in(fs::path(testing::BundledModelRepository()) / "simple" / "config.pbtxt");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return absl::StrReplaceAll(
      text, {{"name: \"simple\"", "name: \"" + name + "\""},
             {"max_batch_size: 8", "max_batch_size: " + std::to_string(max_batch_size)}});
}

void WriteFile(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// The repository index entry of `name` (state, reason); nullopt if not listed.
std::optional<std::pair<std::string, std::string>> IndexEntry(client::InferenceClient& client,
                                                              const std::string& name) {
  auto index = client.RepositoryIndex();
  if (!index.ok()) return std::nullopt;
  for (const auto& model : index->models()) {
    if (model.name() == name) return std::make_pair(model.state(), model.reason());
  }
  return std::nullopt;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

// A folder copied in becomes ready; a changed config is reloaded (max_batch_size in the config
// answer) while the old version keeps serving; a removed folder is unloaded and leaves the index.
TEST(RepositoryPollTest, NewFoldersLoadChangedOnesReloadRemovedOnesUnload) {
  testing::TempRepository repository;
  auto server = StartPolling(repository.path());
  ASSERT_NE(server, nullptr);
  auto client = client::InferenceClient::Create(server->address());
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_FALSE((*client)->ModelReady("dropped").value_or(false));

  const fs::path folder = fs::path(repository.path()) / "dropped";
  fs::create_directories(folder / "1");
  WriteFile(folder / "config.pbtxt", SimpleConfig("dropped", 8));
  ASSERT_TRUE(WaitFor([&] { return (*client)->ModelReady("dropped").value_or(false); }))
      << server->Log();
  auto config = (*client)->ModelConfig("dropped");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->max_batch_size(), 8);

  WriteFile(folder / "config.pbtxt", SimpleConfig("dropped", 4));
  bool always_ready = true;
  ASSERT_TRUE(WaitFor([&] {
    // The old version serves until the new one is ready: never a moment not ready.
    always_ready = always_ready && (*client)->ModelReady("dropped").value_or(false);
    auto now = (*client)->ModelConfig("dropped");
    return now.ok() && now->max_batch_size() == 4;
  })) << server->Log();
  EXPECT_TRUE(always_ready);
  EXPECT_THAT(server->Log(), HasSubstr("model 'dropped' reloaded"));

  fs::remove_all(folder);
  ASSERT_TRUE(WaitFor([&] { return !IndexEntry(**client, "dropped").has_value(); }))
      << server->Log();
  EXPECT_FALSE((*client)->ModelReady("dropped").value_or(true));
  EXPECT_THAT(server->Log(), HasSubstr("model 'dropped' unloaded"));
  auto code = server->Stop();
  EXPECT_TRUE(code.ok() && *code == 0) << server->Log();
}

// A half-copied folder: its config is cut short and a file in its version folder keeps growing.
// Nothing is loaded while it changes (no failed load, no "LOADING"); once complete and stable,
// it becomes ready, and the server never recorded a broken load of it.
TEST(RepositoryPollTest, AHalfCopiedFolderWaitsUntilStableAndIsNeverLoadedBroken) {
  testing::TempRepository repository;
  auto server = StartPolling(repository.path());
  ASSERT_NE(server, nullptr);
  auto client = client::InferenceClient::Create(server->address());
  ASSERT_TRUE(client.ok()) << client.status();

  const fs::path folder = fs::path(repository.path()) / "half";
  const std::string full = SimpleConfig("half", 8);
  fs::create_directories(folder / "1");
  WriteFile(folder / "config.pbtxt", full.substr(0, full.size() / 3));
  std::ofstream growing(folder / "1" / "weights.bin");
  ASSERT_TRUE(growing.is_open());
  const auto copy_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(3500);
  while (std::chrono::steady_clock::now() < copy_end) {
    growing << std::string(4096, 'x') << std::flush;
    auto entry = IndexEntry(**client, "half");
    if (entry.has_value()) {
      EXPECT_EQ(entry->first, "UNAVAILABLE");
      EXPECT_EQ(entry->second, "not loaded");  // never tried, so no parse error recorded
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }
  WriteFile(folder / "config.pbtxt", full);  // the copy completes
  growing << "end" << std::flush;
  growing.close();
  ASSERT_TRUE(WaitFor([&] { return (*client)->ModelReady("half").value_or(false); }))
      << server->Log();
  EXPECT_THAT(server->Log(), HasSubstr("model 'half' appeared"));
  EXPECT_THAT(server->Log(), Not(HasSubstr("model 'half' failed to load"))) << server->Log();
  auto code = server->Stop();
  EXPECT_TRUE(code.ok() && *code == 0) << server->Log();
}

// A stable but broken folder is loaded, fails (UNAVAILABLE with the reason), and is not tried
// again on every poll; fixing its config makes it ready.
TEST(RepositoryPollTest, AFailedModelIsRetriedWhenItsFilesChangeNotEveryPoll) {
  testing::TempRepository repository;
  auto server = StartPolling(repository.path());
  ASSERT_NE(server, nullptr);
  auto client = client::InferenceClient::Create(server->address());
  ASSERT_TRUE(client.ok()) << client.status();

  const fs::path folder = fs::path(repository.path()) / "fixme";
  fs::create_directories(folder / "1");
  WriteFile(folder / "config.pbtxt", "backend: \"simple\" input [ { name: ");
  ASSERT_TRUE(WaitFor([&] {
    auto entry = IndexEntry(**client, "fixme");
    return entry.has_value() && entry->second.find("config.pbtxt") != std::string::npos;
  })) << server->Log();
  EXPECT_EQ(IndexEntry(**client, "fixme")->first, "UNAVAILABLE");
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));  // three more polls
  EXPECT_EQ(Count(server->Log(), "model 'fixme' failed to load"), 1u) << server->Log();

  WriteFile(folder / "config.pbtxt", SimpleConfig("fixme", 8));
  ASSERT_TRUE(WaitFor([&] { return (*client)->ModelReady("fixme").value_or(false); }))
      << server->Log();
  auto code = server->Stop();
  EXPECT_TRUE(code.ok() && *code == 0) << server->Log();
}

// As Triton: in poll mode the explicit load/unload API is refused, naming the mode it needs; and
// a poll interval of 0 is refused at start-up, naming the flag.
TEST(RepositoryPollTest, ExplicitLoadIsRefusedAndAZeroIntervalTooInPollMode) {
  testing::TempRepository repository;
  repository.CopyBundled("simple");
  auto server = StartPolling(repository.path());
  ASSERT_NE(server, nullptr);
  auto client = client::InferenceClient::Create(server->address());
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->ModelReady("simple").value_or(false));  // loaded at start-up
  absl::Status load = (*client)->LoadModel("simple");
  EXPECT_EQ(load.code(), absl::StatusCode::kFailedPrecondition) << load;
  EXPECT_THAT(std::string(load.message()), HasSubstr("--model-control-mode=explicit"));
  absl::Status unload = (*client)->UnloadModel("simple");
  EXPECT_EQ(unload.code(), absl::StatusCode::kFailedPrecondition) << unload;
  auto code = server->Stop();
  EXPECT_TRUE(code.ok() && *code == 0) << server->Log();

  auto zero = ServerProcess::Start({"--model-repository=" + repository.path(),
                                    "--model-control-mode=poll", "--repository-poll-secs=0"});
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(std::string(zero.status().message()), HasSubstr("--repository-poll-secs"));
}

}  // namespace
}  // namespace sluice
