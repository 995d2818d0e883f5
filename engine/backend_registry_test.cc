#include "engine/backend_registry.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BackendRegistryTest, ListsEveryBackendOnceInNameOrder) {
  EXPECT_THAT(KnownBackends(), ElementsAre("encoder", "identity", "mlp", "simple"));
  for (const BackendRegistration& backend : Backends()) {
    EXPECT_NE(backend.create_model, nullptr) << backend.name;
    ASSERT_TRUE(FindBackend("m", backend.name).ok()) << backend.name;
    EXPECT_EQ(*FindBackend("m", backend.name), &backend);
  }
}

// A misspelled backend in a three-line config (no inputs declared) is reported as what it is,
// before any check that would blame the missing inputs.
TEST(BackendRegistryTest, UnknownBackendIsNamedWithTheKnownOnesBeforeAnyOtherCheck) {
  ModelSpec spec;
  spec.config.name = "minilm";
  spec.config.backend = "encodr";
  spec.config.max_batch_size = 32;
  for (const absl::Status& status :
       {CompleteModelConfig(spec).status(), CreateModel(spec).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(status.message(),
              "model 'minilm': unknown backend 'encodr' (known: encoder, identity, mlp, simple)");
  }
}

TEST(BackendRegistryTest, BackendsWithoutConfigCompletionKeepTheConfig) {
  ModelSpec spec;
  spec.config.name = "s";
  spec.config.backend = "simple";
  spec.config.max_batch_size = 8;
  absl::StatusOr<ModelConfig> completed = CompleteModelConfig(spec);
  ASSERT_TRUE(completed.ok()) << completed.status();
  EXPECT_EQ(completed->name, "s");
  EXPECT_EQ(completed->max_batch_size, 8);
  EXPECT_TRUE(completed->inputs.empty());
}

}  // namespace
}  // namespace sluice::engine
