#include "engine/model_version_table.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<LoadedVersion> Version(int64_t version) {
  auto loaded = std::make_shared<LoadedVersion>(ModelStatsOptions{.model_name = "m"});
  loaded->version = version;
  return loaded;
}

TEST(ModelVersionTableTest, ResolvesTheNewestVersionThatHasNotFaulted) {
  ModelVersionTable table;
  auto v1 = Version(1);
  auto v2 = Version(2);
  EXPECT_EQ(table.Install("m", 1, v1), nullptr);
  EXPECT_EQ(table.Install("m", 2, v2), nullptr);
  EXPECT_EQ(*table.Resolve("m", -1, false), v2);
  EXPECT_EQ(*table.Resolve("m", 1, false), v1);
  EXPECT_TRUE(table.MarkFaulted("m", *v2, "instance 0 faulted: boom"));
  EXPECT_FALSE(table.MarkFaulted("m", *v2, "a second fault"));  // the first reason stands
  EXPECT_EQ(*table.Resolve("m", -1, false), v1);
  absl::StatusOr<std::shared_ptr<LoadedVersion>> faulted = table.Resolve("m", 2, false);
  EXPECT_EQ(faulted.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(faulted.status().message()),
              HasSubstr("model 'm' version 2 is not ready: instance 0 faulted: boom"));
  EXPECT_EQ(*table.Resolve("m", 2, /*faulted_ok=*/true), v2);
  EXPECT_EQ(table.ReadyVersions("m"), std::vector<int64_t>({1}));
  EXPECT_EQ(table.Resolve("x", -1, false).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table.Resolve("m", 7, false).status().code(), absl::StatusCode::kNotFound);
}

TEST(ModelVersionTableTest, FailedLoadsAreUnavailableAndAReloadClearsThem) {
  ModelVersionTable table;
  table.RecordLoadFailure("m", 3, "weights file missing");
  absl::StatusOr<std::shared_ptr<LoadedVersion>> failed = table.Resolve("m", 3, false);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("weights file missing"));
  std::vector<ModelVersionStatus> list = table.List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].state, ModelState::kUnavailable);

  auto v3 = Version(3);
  table.Install("m", 3, v3);
  table.RecordLoadFailure("m", 3, "reload broke");  // the installed load keeps serving
  list = table.List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].state, ModelState::kReady);
  EXPECT_EQ(list[0].reason, "reload failed, previous load serving: reload broke");
  auto v3b = Version(3);
  EXPECT_EQ(table.Install("m", 3, v3b), v3);  // replaced: the caller stops it
  EXPECT_EQ(table.List()[0].reason, "");
  // A fault reported by the replaced load does not mark the new one.
  EXPECT_TRUE(table.MarkFaulted("m", *v3, "late fault of the old load"));
  EXPECT_EQ(table.List()[0].state, ModelState::kReady);
}

TEST(ModelVersionTableTest, RemovesVersionsModelsAndFailures) {
  ModelVersionTable table;
  table.Install("m", 1, Version(1));
  table.Install("m", 2, Version(2));
  table.RecordLoadFailure("f", 1, "bad config");
  EXPECT_EQ(table.RemoveVersion("m", 3).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(table.RemoveVersion("m", 1).ok());
  EXPECT_EQ(table.Select("m", -1).size(), 1u);
  absl::StatusOr<ModelVersionTable::Versions> only_failures = table.RemoveModel("f");
  ASSERT_TRUE(only_failures.ok());
  EXPECT_TRUE(only_failures->empty());
  EXPECT_EQ(table.RemoveModel("f").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table.RemoveAll().at("m").size(), 1u);
  EXPECT_TRUE(table.List().empty());
}

// A model whose config failed never had a version: every version of it, and the newest, is
// UNAVAILABLE with the config's reason (not "unknown model"), until a version loads or fails, or
// the model is removed (issue 34).
TEST(ModelVersionTableTest, AWholeModelFailureAnswersEveryVersionUntilAVersionLoads) {
  ModelVersionTable table;
  table.RecordLoadFailure("m", 2, "weights missing");
  table.RecordLoadFailure("m", ModelVersionTable::kWholeModel, "config.pbtxt:1:5: syntax error");
  for (int64_t version : {int64_t{-1}, int64_t{1}, int64_t{2}}) {
    absl::StatusOr<std::shared_ptr<LoadedVersion>> resolved = table.Resolve("m", version, true);
    EXPECT_EQ(resolved.status().code(), absl::StatusCode::kUnavailable) << version;
    EXPECT_THAT(std::string(resolved.status().message()),
                HasSubstr("model 'm' is not ready: config.pbtxt:1:5: syntax error"))
        << version;
  }
  ASSERT_EQ(table.List().size(), 1u);  // the older version failure was replaced
  EXPECT_EQ(table.List()[0].version, ModelVersionTable::kWholeModel);
  EXPECT_EQ(table.List()[0].state, ModelState::kUnavailable);

  table.Install("m", 1, Version(1));  // the config was fixed
  EXPECT_TRUE(table.Resolve("m", -1, false).ok());
  EXPECT_EQ(table.List().size(), 1u);
  ASSERT_TRUE(table.RemoveModel("m").ok());
  table.RecordLoadFailure("m", ModelVersionTable::kWholeModel, "broken again");
  table.RecordLoadFailure("m", 1, "weights missing");  // a version's own failure replaces it
  EXPECT_THAT(std::string(table.Resolve("m", -1, false).status().message()),
              HasSubstr("weights missing"));
  ASSERT_TRUE(table.RemoveModel("m").ok());
  EXPECT_EQ(table.Resolve("m", -1, false).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sluice::engine
