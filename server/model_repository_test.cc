#include "server/model_repository.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "common/echo.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::server {
namespace {
namespace fs = std::filesystem;

constexpr char kIdentityConfig[] = R"pb(
  backend: "identity"
  max_batch_size: 4 input
  [ {
    name: "IN"
    data_type: TYPE_FP32
    dims: [ 2 ]
  }] output
  [ {
    name: "OUT"
    data_type: TYPE_FP32
    dims: [ 2 ]
  }]
)pb";

class ModelRepositoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        fs::path(::testing::TempDir()) /
        ("repo_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    engine_ = *engine::Engine::Create({});
  }
  void TearDown() override {
    engine_->Shutdown();
    fs::remove_all(root_);
  }

  void WriteModel(const std::string& name, const std::string& config,
                  std::vector<int> versions = {1}) {
    fs::create_directories(root_ / name);
    std::ofstream(root_ / name / "config.pbtxt") << config;
    for (int v : versions) fs::create_directories(root_ / name / std::to_string(v));
  }

  std::unique_ptr<ModelRepository> Open() {
    auto repository = ModelRepository::Create(root_.string(), engine_.get(), nullptr);
    EXPECT_TRUE(repository.ok()) << repository.status();
    return *std::move(repository);
  }

  fs::path root_;
  std::unique_ptr<engine::Engine> engine_;
};

TEST_F(ModelRepositoryTest, BrokenModelsDoNotStopTheOthers) {
  WriteModel("good", kIdentityConfig);
  WriteModel("bad_syntax", "backend: \"identity\" input [ { name: ");
  std::string trt = kIdentityConfig;
  trt.replace(trt.find("identity"), 8, "tensorrt_plan");
  WriteModel("bad_backend", trt);
  WriteModel("no_versions", kIdentityConfig, {});
  fs::create_directories(root_ / "no_config" / "1");
  auto repository = Open();
  EXPECT_EQ(repository->LoadAll().size(), 4u);
  EXPECT_TRUE(engine_->IsModelReady("good", -1));

  std::map<std::string, ModelRepository::IndexEntry> index;
  for (const auto& entry : repository->Index(false)) index[entry.name] = entry;
  ASSERT_EQ(index.size(), 5u);
  EXPECT_EQ(index["good"].state, "READY");
  EXPECT_EQ(index["good"].version, "1");
  EXPECT_EQ(index["bad_syntax"].state, "UNAVAILABLE");
  EXPECT_NE(index["bad_syntax"].reason.find("config.pbtxt"), std::string::npos);
  EXPECT_NE(index["bad_backend"].reason.find("unknown backend 'tensorrt_plan'"), std::string::npos)
      << index["bad_backend"].reason;
  EXPECT_NE(index["no_versions"].reason.find("no version folders"), std::string::npos);
  EXPECT_NE(index["no_config"].reason.find("cannot read"), std::string::npos);

  const auto ready = repository->Index(true);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].name, "good");
}

TEST_F(ModelRepositoryTest, VersionPolicies) {
  WriteModel("latest2",
             std::string(kIdentityConfig) + "version_policy { latest { num_versions: 2 } }",
             {1, 2, 3});
  WriteModel("all", std::string(kIdentityConfig) + "version_policy { all {} }", {1, 5});
  WriteModel("specific",
             std::string(kIdentityConfig) + "version_policy { specific { versions: [1] } }",
             {1, 2});
  WriteModel("default", kIdentityConfig, {3, 10, 9});
  auto repository = Open();
  EXPECT_EQ(repository->LoadAll().size(), 0u);
  auto versions = [&](const std::string& name) {
    auto info = engine_->GetModel(name, -1);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? info->ready_versions : std::vector<int64_t>{};
  };
  EXPECT_EQ(versions("latest2"), std::vector<int64_t>({2, 3}));
  EXPECT_EQ(versions("all"), std::vector<int64_t>({1, 5}));
  EXPECT_EQ(versions("specific"), std::vector<int64_t>({1}));
  EXPECT_EQ(versions("default"), std::vector<int64_t>({10}));  // numeric, not lexical, order
}

TEST_F(ModelRepositoryTest, ReloadDropsVersionsNoLongerSelected) {
  WriteModel("m", std::string(kIdentityConfig) + "version_policy { all {} }", {1, 2});
  auto repository = Open();
  ASSERT_TRUE(repository->Load("m").ok());
  EXPECT_TRUE(engine_->IsModelReady("m", 1));
  std::ofstream(root_ / "m" / "config.pbtxt") << kIdentityConfig;  // latest 1
  ASSERT_TRUE(repository->Load("m").ok());
  EXPECT_FALSE(engine_->IsModelReady("m", 1));
  EXPECT_TRUE(engine_->IsModelReady("m", 2));
}

TEST_F(ModelRepositoryTest, UnloadAndStates) {
  WriteModel("m", kIdentityConfig);
  auto repository = Open();
  EXPECT_EQ(repository->Index(false)[0].reason, "not loaded");
  EXPECT_EQ(repository->Unload("m").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(repository->Load("m").ok());
  ASSERT_TRUE(repository->GetConfig("m").ok());
  EXPECT_EQ(repository->GetConfig("m")->name(), "m");
  ASSERT_TRUE(repository->Unload("m").ok());
  EXPECT_FALSE(engine_->IsModelReady("m", -1));
  const auto index = repository->Index(false);
  ASSERT_EQ(index.size(), 1u);
  EXPECT_EQ(index[0].state, "UNAVAILABLE");
  EXPECT_EQ(index[0].reason, "unloaded");
  EXPECT_EQ(repository->Load("missing").code(), absl::StatusCode::kNotFound);
}

TEST_F(ModelRepositoryTest, ModelNamesCannotLeaveTheRepository) {
  for (const std::string& name :
       {std::string("../x"), std::string(".."), std::string("."), std::string("a/b"),
        std::string(""), std::string("a\\b"), std::string("x\0y", 3), std::string("/etc")}) {
    EXPECT_EQ(ModelRepository::ValidateModelName(name).code(), absl::StatusCode::kInvalidArgument)
        << name;
  }
  EXPECT_TRUE(ModelRepository::ValidateModelName("mlp_large-2.v1").ok());
  auto repository = Open();
  EXPECT_EQ(repository->Load("../x").code(), absl::StatusCode::kInvalidArgument);
}

// Issue 17 item 8: a config.pbtxt that is a FIFO blocked the control thread for good (open()
// waits for a writer); a device such as /dev/zero was read up to 2 GB. Only regular files of
// bounded size are read now, and a FIFO answers at once.
TEST_F(ModelRepositoryTest, ConfigMustBeARegularFileOfBoundedSize) {
  fs::create_directories(root_ / "fifo" / "1");
  ASSERT_EQ(mkfifo((root_ / "fifo" / "config.pbtxt").c_str(), 0600), 0);
  fs::create_directories(root_ / "device" / "1");
  fs::create_symlink("/dev/zero", root_ / "device" / "config.pbtxt");
  WriteModel("large", std::string(kIdentityConfig) + std::string(2 << 20, ' '));
  WriteModel("good", kIdentityConfig);
  RepositoryOptions options;
  options.allow_symlinks_out_of_repository = true;  // /dev/zero must fail as a device
  auto repository = *ModelRepository::Create(root_.string(), engine_.get(), nullptr, options);
  const auto start = std::chrono::steady_clock::now();
  absl::Status fifo = repository->Load("fifo");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_TRUE(absl::IsInvalidArgument(fifo)) << fifo;
  EXPECT_THAT(fifo.message(), ::testing::HasSubstr("not a regular file"));
  absl::Status device = repository->Load("device");
  EXPECT_THAT(device.message(), ::testing::HasSubstr("not a regular file")) << device;
  absl::Status large = repository->Load("large");
  EXPECT_THAT(large.message(), ::testing::HasSubstr("--max-config-bytes")) << large;
  EXPECT_TRUE(repository->Load("good").ok());
}

// Issue 17 item 3: a config that asks for terabytes or thousands of threads is its own load
// error, found before anything is allocated; the others load, and LoadAll() returns.
TEST_F(ModelRepositoryTest, OversizedConfigsAreRefusedAndOthersLoad) {
  std::string huge = kIdentityConfig;
  for (size_t at; (at = huge.find("dims: [ 2 ]")) != std::string::npos;) {
    huge.replace(at, 11, "dims: [ 1099511627776 ]");
  }
  WriteModel("huge", huge);
  WriteModel("many", std::string(kIdentityConfig) + "instance_group [{ count: 1500 }]");
  WriteModel("gpus", std::string(kIdentityConfig) +
                         "instance_group [{ count: 2147483647 gpus: [0, 1] kind: KIND_GPU }]");
  WriteModel("good", kIdentityConfig);
  auto repository = Open();
  EXPECT_EQ(repository->LoadAll().size(), 3u);
  EXPECT_TRUE(engine_->IsModelReady("good", -1));
  std::map<std::string, ModelRepository::IndexEntry> index;
  for (const auto& entry : repository->Index(false)) index[entry.name] = entry;
  EXPECT_THAT(index["huge"].reason, ::testing::AllOf(::testing::HasSubstr("input 'IN'"),
                                                     ::testing::HasSubstr("--max-tensor-bytes")));
  EXPECT_THAT(index["many"].reason, ::testing::HasSubstr("--max-model-instances"));
  EXPECT_THAT(index["gpus"].reason, ::testing::HasSubstr("--max-model-instances"));
}

// Issue 17 item 7: a 50 MB `name` made the load error 50 MB, repeated in every RepositoryIndex
// answer. Names are bounded at load and every echo is cut (here under the config size limit).
TEST_F(ModelRepositoryTest, HugeConfigNamesAreEchoedCut) {
  WriteModel("named", std::string(kIdentityConfig) + "name: \"" + std::string(900000, 'n') + "\"");
  WriteModel("tensor", std::string(kIdentityConfig) + "input [{ name: \"" +
                           std::string(900000, 't') + "\" data_type: TYPE_FP32 dims: [1] }]");
  auto repository = Open();
  EXPECT_EQ(repository->LoadAll().size(), 2u);
  size_t total = 0;
  for (const auto& entry : repository->Index(false)) {
    total += entry.reason.size();
    EXPECT_THAT(entry.reason, ::testing::HasSubstr("truncated: 900000 bytes")) << entry.name;
  }
  EXPECT_LT(total, 2 * common::kMaxMessageBytes);
  EXPECT_LT(repository->Load("named").message().size(), common::kMaxMessageBytes + 100);
}

// Issue 17 item 10: symlinks that leave the repository (model folder, version folder, a file in
// it such as the weights) are refused unless allowed; ones that stay inside are followed.
TEST_F(ModelRepositoryTest, SymlinksOutOfTheRepositoryAreRefused) {
  const fs::path outside = root_.string() + "_outside";
  fs::remove_all(outside);
  fs::create_directories(outside / "model" / "1");
  std::ofstream(outside / "model" / "config.pbtxt") << kIdentityConfig;
  fs::create_directories(outside / "v");
  std::ofstream(outside / "secret") << "weights";
  fs::create_directory_symlink(outside / "model", root_ / "linked_model");
  WriteModel("linked_version", kIdentityConfig, {});
  fs::create_directory_symlink(outside / "v", root_ / "linked_version" / "1");
  WriteModel("linked_file", kIdentityConfig);
  fs::create_symlink(outside / "secret", root_ / "linked_file" / "1" / "model.safetensors");
  WriteModel("inside", kIdentityConfig, {});
  fs::create_directory_symlink(root_ / "linked_file" / "1", root_ / "inside" / "1");

  auto repository = Open();
  for (const std::string name : {"linked_model", "linked_version", "linked_file"}) {
    absl::Status status = repository->Load(name);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << name << ": " << status;
    EXPECT_THAT(status.message(),
                ::testing::AllOf(::testing::HasSubstr("outside the repository"),
                                 ::testing::HasSubstr("--allow-symlinks-out-of-repository")));
  }
  // `inside/1` links to another model's folder in the repository, whose file links out.
  EXPECT_THAT(repository->Load("inside").message(), ::testing::HasSubstr("outside"));
  std::filesystem::remove(root_ / "linked_file" / "1" / "model.safetensors");
  EXPECT_TRUE(repository->Load("inside").ok());

  RepositoryOptions allow;
  allow.allow_symlinks_out_of_repository = true;
  auto allowing = *ModelRepository::Create(root_.string(), engine_.get(), nullptr, allow);
  EXPECT_TRUE(allowing->Load("linked_model").ok());
  EXPECT_TRUE(allowing->Load("linked_version").ok());
  fs::remove_all(outside);
}

// Issue 17 item 10: "1" and "01" were both version 1 (one silently lost), and " 1" was loaded
// from "1/". A numeric-looking folder that is not canonical is refused by name.
TEST_F(ModelRepositoryTest, AmbiguousVersionFoldersAreRefused) {
  auto repository = Open();
  for (const std::string folder : {"01", " 1", "+1", "99999999999999999999"}) {
    fs::remove_all(root_ / "m");
    WriteModel("m", kIdentityConfig, {1});
    fs::create_directories(root_ / "m" / folder);
    absl::Status status = repository->Load("m");
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << "'" << folder << "': " << status;
    EXPECT_THAT(status.message(), ::testing::AllOf(::testing::HasSubstr("'" + folder + "'"),
                                                   ::testing::HasSubstr("ambiguous")));
  }
  fs::remove_all(root_ / "m");
  WriteModel("m", kIdentityConfig, {1, 2});
  fs::create_directories(root_ / "m" / "assets");
  EXPECT_TRUE(repository->Load("m").ok());
}

// Issue 34: a model whose config does not parse was "unknown model" to every request, its reason
// only in the log. It is UNAVAILABLE with the reason, on every version, and the index says so
// with no version (the failure concerns the whole model, as Triton's index shows it).
TEST_F(ModelRepositoryTest, AConfigFailureIsUnavailableWithTheReason) {
  WriteModel("good", kIdentityConfig);
  WriteModel("broken", "backend: \"identity\" input [ { name: ");
  auto repository = Open();
  EXPECT_EQ(repository->LoadAll(), std::vector<std::string>({"broken"}));
  for (int64_t version : {int64_t{-1}, int64_t{1}}) {
    absl::Status status = engine_->GetModel("broken", version).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_THAT(status.message(), ::testing::HasSubstr("config.pbtxt")) << status;
  }
  std::map<std::string, ModelRepository::IndexEntry> index;
  for (const auto& entry : repository->Index(false)) index[entry.name] = entry;
  ASSERT_EQ(index.size(), 2u);
  EXPECT_EQ(index["broken"].state, "UNAVAILABLE");
  EXPECT_EQ(index["broken"].version, "");
  EXPECT_THAT(index["broken"].reason, ::testing::HasSubstr("config.pbtxt"));

  // Fixed on disk and loaded again: it serves; unloaded: unknown again.
  WriteModel("broken", kIdentityConfig);
  ASSERT_TRUE(repository->Load("broken").ok());
  EXPECT_TRUE(engine_->IsModelReady("broken", -1));
  std::ofstream(root_ / "broken" / "config.pbtxt") << "nonsense {";
  EXPECT_FALSE(repository->Load("broken").ok());
  EXPECT_EQ(engine_->GetModel("broken", -1).status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(repository->Unload("broken").ok());
  EXPECT_EQ(engine_->GetModel("broken", -1).status().code(), absl::StatusCode::kNotFound);
}

// --strict-readiness: every model asked to load must be ready; models nobody asked for do not
// count, an unloaded one no longer counts, and a reload keeps the previous versions serving.
TEST_F(ModelRepositoryTest, AllModelsReadyCountsTheModelsAskedToLoad) {
  WriteModel("good", kIdentityConfig);
  WriteModel("broken", "backend: \"identity\" input [ { name: ");
  WriteModel("no_versions", kIdentityConfig, {});
  int changes = 0;
  RepositoryOptions options;
  options.on_models_changed = [&changes] { ++changes; };
  auto repository = *ModelRepository::Create(root_.string(), engine_.get(), nullptr, options);
  EXPECT_TRUE(repository->AllModelsReady());  // none asked yet
  ASSERT_TRUE(repository->Load("good").ok());
  EXPECT_TRUE(repository->AllModelsReady());  // "broken" is in the folder, but nobody asked
  EXPECT_FALSE(repository->Load("broken").ok());
  EXPECT_FALSE(repository->AllModelsReady());
  EXPECT_FALSE(repository->Load("no_versions").ok());
  ASSERT_TRUE(repository->Unload("broken").ok());
  EXPECT_FALSE(repository->AllModelsReady());
  ASSERT_TRUE(repository->Unload("no_versions").ok());
  EXPECT_TRUE(repository->AllModelsReady());
  ASSERT_TRUE(repository->Load("good").ok());  // a reload
  EXPECT_TRUE(repository->AllModelsReady());
  EXPECT_EQ(changes, 6);  // every Load and Unload, whatever its outcome
}

// `--load-model nosuch` logged "1 model(s) failed" while the index did not list the name. A name
// asked for at start-up with no folder is recorded: listed, counted against readiness, and
// requests for it answer UNAVAILABLE with the reason. A client's Load of such a name records
// nothing (clients must not grow the records).
TEST_F(ModelRepositoryTest, LoadListedRecordsANameWithNoFolder) {
  WriteModel("good", kIdentityConfig);
  WriteModel("other", kIdentityConfig);
  auto repository = Open();
  EXPECT_EQ(repository->LoadListed({"good", "nosuch", "../x"}),
            std::vector<std::string>({"nosuch", "../x"}));
  EXPECT_FALSE(repository->AllModelsReady());
  std::map<std::string, ModelRepository::IndexEntry> index;
  for (const auto& entry : repository->Index(false)) index[entry.name] = entry;
  ASSERT_EQ(index.count("nosuch"), 1u);
  EXPECT_EQ(index["nosuch"].state, "UNAVAILABLE");
  EXPECT_THAT(index["nosuch"].reason, ::testing::HasSubstr("has no folder in the repository"));
  absl::Status status = engine_->GetModel("nosuch", -1).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;

  // The gauge's view: the models asked to load, failed ones included; not "other".
  std::map<std::string, std::string> states;
  for (const auto& entry : repository->RequestedModelStates()) states[entry.name] = entry.state;
  EXPECT_EQ(states,
            (std::map<std::string, std::string>{{"good", "READY"}, {"nosuch", "UNAVAILABLE"}}));

  EXPECT_EQ(repository->Load("missing").code(), absl::StatusCode::kNotFound);
  for (const auto& entry : repository->Index(false)) EXPECT_NE(entry.name, "missing");
  ASSERT_TRUE(repository->Unload("nosuch").ok());
  EXPECT_TRUE(repository->AllModelsReady());
}

TEST_F(ModelRepositoryTest, MissingRootIsNotFound) {
  auto repository = ModelRepository::Create((root_ / "nope").string(), engine_.get(), nullptr);
  EXPECT_EQ(repository.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sluice::server
