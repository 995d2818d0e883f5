#include "server/model_repository.h"

#include <filesystem>
#include <fstream>

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
  EXPECT_EQ(repository->LoadAll(), 4);
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
  EXPECT_EQ(repository->LoadAll(), 0);
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

TEST_F(ModelRepositoryTest, MissingRootIsNotFound) {
  auto repository = ModelRepository::Create((root_ / "nope").string(), engine_.get(), nullptr);
  EXPECT_EQ(repository.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sluice::server
