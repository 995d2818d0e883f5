#include "server/model_config_parser.h"

#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace sluice::server {
namespace {

constexpr char kSimpleConfig[] = R"pb(
  name: "simple"
  backend: "simple"
  max_batch_size: 8 input
  [ {
    name: "INPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
    , {
      name: "INPUT1"
      data_type: TYPE_INT32
      dims: [ 16 ]
    }] output
  [ {
    name: "OUTPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
    , {
      name: "OUTPUT1"
      data_type: TYPE_STRING
      dims: [ -1 ]
    }]
  dynamic_batching {
    max_queue_delay_microseconds: 250
    preferred_batch_size: [ 4, 8 ]
    default_queue_policy {
      max_queue_size: 7
      default_timeout_microseconds: 1000
      allow_timeout_override: true
    }
  } instance_group
  [ { count: 2 kind: KIND_CPU }
    , { kind: KIND_CPU }]
  parameters {
    key: "activation"
    value: { string_value: "relu" }
  }
)pb";

TEST(ModelConfigParserTest, ConvertsEverySupportedField) {
  absl::StatusOr<inference::ModelConfig> proto = ParseModelConfigText(kSimpleConfig, "cfg");
  ASSERT_TRUE(proto.ok()) << proto.status();
  absl::StatusOr<engine::ModelConfig> config = ToEngineModelConfig(*proto, "simple");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->name, "simple");
  EXPECT_EQ(config->backend, "simple");
  EXPECT_EQ(config->max_batch_size, 8);
  ASSERT_EQ(config->inputs.size(), 2u);
  EXPECT_EQ(config->inputs[1].name, "INPUT1");
  EXPECT_EQ(config->inputs[1].dtype, engine::DataType::kInt32);
  EXPECT_EQ(config->inputs[1].dims, engine::Shape({16}));
  EXPECT_EQ(config->outputs[1].dtype, engine::DataType::kBytes);
  EXPECT_EQ(config->outputs[1].dims, engine::Shape({-1}));
  ASSERT_TRUE(config->dynamic_batching.has_value());
  EXPECT_EQ(config->dynamic_batching->max_queue_delay, std::chrono::microseconds(250));
  EXPECT_EQ(config->dynamic_batching->preferred_batch_sizes, std::vector<int>({4, 8}));
  EXPECT_EQ(config->queue_policy.max_queue_size, 7);
  EXPECT_EQ(config->queue_policy.default_timeout, std::chrono::microseconds(1000));
  EXPECT_TRUE(config->queue_policy.allow_timeout_override);
  EXPECT_EQ(config->instance_count, 3);  // 2 + a group whose count defaults to 1
  EXPECT_EQ(config->instance_kind, engine::InstanceKind::kCpu);
  EXPECT_EQ(config->parameters.at("activation"), "relu");
}

TEST(ModelConfigParserTest, ReadsGpuPlacementAndCudaGraphs) {
  // Defaults: no placement, graphs on.
  auto proto = ParseModelConfigText(R"pb(backend: "identity")pb", "cfg");
  ASSERT_TRUE(proto.ok());
  auto config = ToEngineModelConfig(*proto, "m");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->instance_gpus.empty());
  EXPECT_TRUE(config->cuda_graphs);

  proto = ParseModelConfigText(R"pb(
                                 backend: "identity" instance_group
                                 [ {
                                   count: 2
                                   kind: KIND_GPU
                                   gpus: [ 0, 1 ]
                                 }
                                   , {
                                     kind: KIND_GPU
                                     gpus: [ 3 ]
                                   }]
                                 optimization { cuda { graphs: false } }
                               )pb",
                               "cfg");
  ASSERT_TRUE(proto.ok()) << proto.status();
  config = ToEngineModelConfig(*proto, "m");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->instance_count, 5);  // Triton: `count` instances on each listed GPU
  EXPECT_EQ(config->instance_gpus, std::vector<int>({0, 0, 1, 1, 3}));
  EXPECT_FALSE(config->cuda_graphs);

  proto = ParseModelConfigText(R"pb(
                                 backend: "identity" instance_group
                                 [ {
                                   count: 1
                                   gpus: [ 0 ]
                                 }
                                   , { count: 1 }]
                               )pb",
                               "cfg");
  ASSERT_TRUE(proto.ok());
  config = ToEngineModelConfig(*proto, "m");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("every group lists `gpus` or none"), std::string::npos)
      << config.status();
}

TEST(ModelConfigParserTest, EmptyNameTakesTheFolderName) {
  auto proto = ParseModelConfigText(R"pb(backend: "identity")pb", "cfg");
  ASSERT_TRUE(proto.ok());
  auto config = ToEngineModelConfig(*proto, "folder");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->name, "folder");
}

// Issue 17 items 3 and 7: names are bounded at load with their echo cut, parser messages (which
// quote the text) are cut, and the instance count is bounded before the per-GPU list is built.
TEST(ModelConfigParserTest, NamesAndInstanceCountsAreBounded) {
  const std::string huge(100000, 'n');
  auto convert = [](const std::string& text) {
    auto proto = ParseModelConfigText(text, "cfg");
    EXPECT_TRUE(proto.ok()) << proto.status();
    return ToEngineModelConfig(*proto, "m");
  };
  for (const std::string& text : {absl::StrCat("backend: \"identity\" name: \"", huge, "\""),
                                  absl::StrCat("backend: \"identity\" input [{ name: \"", huge,
                                               "\" data_type: TYPE_FP32 dims: [1] }]"),
                                  absl::StrCat("backend: \"", huge, "\""),
                                  absl::StrCat("backend: \"identity\" parameters { key: \"", huge,
                                               "\" value { string_value: \"v\" } }")}) {
    auto config = convert(text);
    ASSERT_FALSE(config.ok());
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(config.status().message().find("truncated: 100000 bytes"), absl::string_view::npos)
        << config.status().message().substr(0, 300);
    EXPECT_LT(config.status().message().size(), 1024u);
  }
  auto bad_syntax = ParseModelConfigText(absl::StrCat("name: ", huge, " x"), "cfg");
  ASSERT_FALSE(bad_syntax.ok());
  EXPECT_LT(bad_syntax.status().message().size(), 4200u);

  auto many = convert("backend: \"identity\" instance_group [{ count: 2147483647 gpus: [0, 1] }]");
  EXPECT_EQ(many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(many.status().message().find("--max-model-instances"), absl::string_view::npos)
      << many.status();
  engine::LoadLimits roomy;
  roomy.max_instances = 4;
  auto proto = ParseModelConfigText(
      "backend: \"identity\" instance_group [{ count: 2 gpus: [0, 1] }]", "cfg");
  EXPECT_EQ(ToEngineModelConfig(*proto, "m", roomy)->instance_count, 4);
  roomy.max_instances = 3;
  EXPECT_FALSE(ToEngineModelConfig(*proto, "m", roomy).ok());
}

TEST(ModelConfigParserTest, SyntaxErrorNamesFileLineAndField) {
  auto proto = ParseModelConfigText("name: \"x\"\nno_such_field: 3\n", "models/x/config.pbtxt");
  ASSERT_FALSE(proto.ok());
  EXPECT_EQ(proto.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(proto.status().message().find("models/x/config.pbtxt"), absl::string_view::npos);
  EXPECT_NE(proto.status().message().find("line 2"), absl::string_view::npos);
  EXPECT_NE(proto.status().message().find("no_such_field"), absl::string_view::npos)
      << proto.status();
}

TEST(ModelConfigParserTest, UnsupportedFieldsAreNamed) {
  struct Case {
    const char* text;
    const char* field;
  };
  const Case cases[] = {
      {R"pb(backend: "simple"
            sequence_batching {})pb",
       "sequence_batching"},
      {R"pb(backend: "simple"
            ensemble_scheduling { step
                                  [ { model_name: "a" }] })pb",
       "ensemble_scheduling"},
      {R"pb(backend: "simple" input
            [ {
              name: "a"
              data_type: TYPE_FP32
              dims: [ 1 ]
              reshape { shape: [ 1 ] }
            }])pb",
       "input[0].reshape"},
      {R"pb(backend: "simple"
            optimization { priority: PRIORITY_MAX })pb",
       "optimization.priority"},
      {R"pb(backend: "simple" model_warmup
            [ { name: "w" }])pb",
       "model_warmup"},
  };
  for (const Case& c : cases) {
    auto proto = ParseModelConfigText(c.text, "cfg");
    ASSERT_TRUE(proto.ok()) << c.text << ": " << proto.status();
    auto config = ToEngineModelConfig(*proto, "m");
    ASSERT_FALSE(config.ok()) << c.text;
    EXPECT_NE(config.status().message().find(absl::StrCat("'", c.field, "'")),
              absl::string_view::npos)
        << config.status();
  }
}

TEST(ModelConfigParserTest, ReadsPriorityLevelsAndTheirQueuePolicies) {
  auto proto = ParseModelConfigText(R"pb(
                                      backend: "identity"
                                      max_batch_size: 4
                                      dynamic_batching {
                                        priority_levels: 3
                                        default_priority_level: 2
                                        default_queue_policy { max_queue_size: 10 }
                                        priority_queue_policy {
                                          key: 1
                                          value: {
                                            max_queue_size: 100
                                            default_timeout_microseconds: 5000
                                            allow_timeout_override: true
                                          }
                                        }
                                      })pb",
                                    "cfg");
  ASSERT_TRUE(proto.ok()) << proto.status();
  absl::StatusOr<engine::ModelConfig> config = ToEngineModelConfig(*proto, "m");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->priority_levels, 3);
  EXPECT_EQ(config->default_priority_level, 2);
  EXPECT_EQ(config->queue_policy.max_queue_size, 10);
  ASSERT_EQ(config->priority_queue_policy.size(), 1u);
  const engine::QueuePolicyConfig& level1 = config->priority_queue_policy.at(1);
  EXPECT_EQ(level1.max_queue_size, 100);
  EXPECT_EQ(level1.default_timeout, std::chrono::microseconds(5000));
  EXPECT_TRUE(level1.allow_timeout_override);
}

TEST(ModelConfigParserTest, RejectsPrioritySettingsOutsideTheLevels) {
  const std::pair<const char*, const char*>
      cases[] =
          {
              {R"pb(dynamic_batching { priority_levels: 2 default_priority_level: 3 })pb",
               "default_priority_level 3 is outside [1, priority_levels=2]"},
              {R"pb(dynamic_batching { priority_levels: 2 })pb",
               "default_priority_level 0 is outside [1, priority_levels=2]"},
              {R"pb(dynamic_batching { default_priority_level: 1 })pb", "need priority_levels > 0"},
              {R"pb(dynamic_batching {
                      priority_levels: 2
                      default_priority_level: 1
                      priority_queue_policy {
                        key: 5
                        value: {}
                      }
                    })pb",
               "priority_queue_policy names level 5"},
              {R"pb(dynamic_batching {
                      priority_levels: 18446744073709551615
                      default_priority_level: 1
                    })pb",
               "priority_levels 1001 is outside [0, 1000]"},
              {R"pb(dynamic_batching {
                      priority_levels: 1
                      default_priority_level: 1
                      priority_queue_policy {
                        key: 1
                        value: { timeout_action: DELAY }
                      }
                    })pb",
               "priority_queue_policy[1].timeout_action: only REJECT"},
              {R"pb(dynamic_batching {
                      default_queue_policy { default_timeout_microseconds: 18446744073709551615 }
                    })pb",
               "is over a year"},
          };
  for (const auto& [dynamic_batching, message] : cases) {
    const std::string text = absl::StrCat(R"pb(backend: "identity"
                                               max_batch_size: 4
                                               input { name: "IN" data_type: TYPE_FP32 dims: 1 }
                                               output { name: "OUT" data_type: TYPE_FP32 dims: 1 }
                                          )pb",
                                          dynamic_batching);
    auto proto = ParseModelConfigText(text, "cfg");
    ASSERT_TRUE(proto.ok()) << text << ": " << proto.status();
    absl::StatusOr<engine::ModelConfig> config = ToEngineModelConfig(*proto, "m");
    absl::Status status = config.status();
    if (config.ok()) status = engine::ValidateModelConfig(*config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(status.message().find(message), absl::string_view::npos) << text << ": " << status;
  }
}

TEST(ModelConfigParserTest, RejectsNameMismatchAndMissingBackend) {
  auto mismatch =
      ToEngineModelConfig(*ParseModelConfigText(R"pb(name: "a" backend: "simple")pb", "c"), "b");
  EXPECT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("differs from its folder name"),
            absl::string_view::npos);
  auto platform =
      ToEngineModelConfig(*ParseModelConfigText(R"pb(platform: "onnxruntime_onnx")pb", "c"), "m");
  EXPECT_FALSE(platform.ok());
  EXPECT_NE(platform.status().message().find("onnxruntime_onnx"), absl::string_view::npos);
  auto kind = ToEngineModelConfig(*ParseModelConfigText(R"pb(backend: "simple" instance_group
                                                             [ { kind: KIND_MODEL }])pb",
                                                        "c"),
                                  "m");
  EXPECT_FALSE(kind.ok());
  EXPECT_NE(kind.status().message().find("KIND_MODEL"), absl::string_view::npos);
}

// Issue 36: ModelConfig shows the precision that serves. The engine hands on the resolved value
// (an encoder's `auto` as what it chose); the client's config shows it under the file's own key
// (a config copied back into a file loads), the other parameters as the file has them.
TEST(ModelConfigParserTest, CompletedConfigShowsTheResolvedParameters) {
  absl::StatusOr<inference::ModelConfig> proto = ParseModelConfigText(
      R"pb(name: "e"
           backend: "encoder"
           parameters {
             key: "precision"
             value: { string_value: "auto" }
           }
           parameters {
             key: "pooling"
             value: { string_value: "mean" }
           })pb",
      "cfg");
  ASSERT_TRUE(proto.ok()) << proto.status();
  absl::StatusOr<engine::ModelConfig> loaded = ToEngineModelConfig(*proto, "e");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  // The file changed since the load: the file's value shows, except for a resolved parameter.
  (*proto->mutable_parameters())["pooling"].set_string_value("cls");
  ApplyCompletedConfig(*loaded, {{"precision", "int8"}}, *proto);
  EXPECT_EQ(proto->parameters().at("precision").string_value(), "int8");
  EXPECT_EQ(proto->parameters().at("pooling").string_value(), "cls");
  EXPECT_EQ(proto->parameters().size(), 2u);
  // The round trip: the config a client reads back loads as the precision that served.
  absl::StatusOr<engine::ModelConfig> reloaded = ToEngineModelConfig(*proto, "e");
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(reloaded->parameters.at("precision"), "int8");

  // A backend that resolves nothing: the file's parameters as they were.
  absl::StatusOr<inference::ModelConfig> simple = ParseModelConfigText(kSimpleConfig, "cfg");
  ASSERT_TRUE(simple.ok());
  const std::string before = simple->DebugString();
  ApplyCompletedConfig(*ToEngineModelConfig(*simple, "simple"), {}, *simple);
  EXPECT_EQ(simple->DebugString(), before);
}

TEST(ModelConfigParserTest, DataTypesRoundTrip) {
  for (int t = inference::DataType_MIN; t <= inference::DataType_MAX; ++t) {
    if (!inference::DataType_IsValid(t)) continue;
    const auto proto_type = static_cast<inference::DataType>(t);
    const engine::DataType engine_type = FromProtoDataType(proto_type);
    if (engine_type == engine::DataType::kInvalid) continue;
    EXPECT_EQ(ToProtoDataType(engine_type), proto_type) << inference::DataType_Name(proto_type);
  }
  EXPECT_EQ(FromProtoDataType(inference::TYPE_STRING), engine::DataType::kBytes);
  EXPECT_EQ(FromProtoDataType(inference::TYPE_BF16), engine::DataType::kBf16);
}

}  // namespace
}  // namespace sluice::server
