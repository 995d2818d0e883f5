// encoder_sentence_modules.h (and text/sentence_prompts.h): the prompts of
// config_sentence_transformers.json and how a request's prompt_name resolves, the Dense
// activations' names, and the pipeline errors of modules.json.
// The numerics against sentence-transformers are tests/integration/sentence_pipeline_test.py.

#include "engine/models/encoder/encoder_sentence_modules.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "text/sentence_prompts.h"

namespace sluice::engine::models::encoder {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class SentenceModulesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           absl::StrCat("sluice_sentence_modules_test_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const std::string& name, const std::string& text) {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name) << text;
  }

  fs::path dir_;
};

TEST_F(SentenceModulesTest, PromptsResolveAsSentenceTransformersDoes) {
  Write("config_sentence_transformers.json",
        R"({"prompts": {"query": "query: ", "passage": "passage: ", "document": ""},
            "default_prompt_name": "query"})");
  absl::StatusOr<text::SentencePrompts> prompts = text::ReadSentencePrompts(dir_);
  ASSERT_TRUE(prompts.ok()) << prompts.status();
  EXPECT_EQ(*prompts->Resolve(std::nullopt), "query: ");  // the default
  EXPECT_EQ(*prompts->Resolve(std::string()), "query: ");
  EXPECT_EQ(*prompts->Resolve("passage"), "passage: ");
  EXPECT_EQ(*prompts->Resolve("document"), "");
  absl::StatusOr<absl::string_view> unknown = prompts->Resolve("nope");
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("prompt_name 'nope' is not one of the model's prompts (document, passage, "
                        "query"));
}

TEST_F(SentenceModulesTest, NoFileNoPromptsAndBadDefaultRefused) {
  absl::StatusOr<text::SentencePrompts> none = text::ReadSentencePrompts(dir_);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none->Resolve(std::nullopt), "");
  EXPECT_THAT(none->Resolve("query").status().message(), HasSubstr("it has none"));
  Write("config_sentence_transformers.json",
        R"({"prompts": {"query": "q: "}, "default_prompt_name": "passage"})");
  EXPECT_THAT(text::ReadSentencePrompts(dir_).status().message(),
              HasSubstr("default_prompt_name 'passage' is not one of its prompts"));
  Write("config_sentence_transformers.json", R"({"prompts": {"query": 3}})");
  EXPECT_THAT(text::ReadSentencePrompts(dir_).status().message(),
              HasSubstr("prompt 'query' is not a string"));
}

TEST_F(SentenceModulesTest, DenseActivationsByClassName) {
  EXPECT_EQ(*ParseDenseActivation("torch.nn.modules.activation.Tanh"), DenseActivation::kTanh);
  EXPECT_EQ(*ParseDenseActivation("torch.nn.modules.linear.Identity"), DenseActivation::kIdentity);
  EXPECT_EQ(*ParseDenseActivation("torch.nn.ReLU"), DenseActivation::kRelu);
  EXPECT_THAT(ParseDenseActivation("torch.nn.modules.activation.Softplus").status().message(),
              HasSubstr("'torch.nn.modules.activation.Softplus' is not supported"));
}

TEST_F(SentenceModulesTest, PipelineOrderAndSizesChecked) {
  EncoderNetwork net;
  net.hidden = 8;
  Write("1_Pooling/config.json", R"({"pooling_mode_mean_tokens": true,
                                     "pooling_mode_lasttoken": true})");
  Write("2_Dense/config.json", R"({"in_features": 16, "out_features": 4, "bias": false,
                                   "activation_function": "torch.nn.modules.linear.Identity"})");
  const std::string pooling = R"({"type": "sentence_transformers.models.Pooling",
                                  "path": "1_Pooling"})";
  const std::string dense = R"({"type": "sentence_transformers.models.Dense", "path": "2_Dense"})";
  const std::string normalize = R"({"type": "sentence_transformers.models.Normalize",
                                    "path": "3_Normalize"})";
  Write("modules.json", absl::StrCat("[", pooling, ",", dense, ",", normalize, "]"));
  ASSERT_TRUE(ReadSentenceModules(dir_, net).ok());
  EXPECT_TRUE(net.pooling.mean && net.pooling.lasttoken && net.normalize);
  EXPECT_EQ(net.pooled_size(), 16);
  ASSERT_EQ(net.dense.size(), 1u);
  EXPECT_FALSE(net.dense[0].has_bias);
  EXPECT_EQ(net.embedding_size(), 4);

  const auto error = [&](const std::string& modules) {
    EncoderNetwork fresh;
    fresh.hidden = 8;
    Write("modules.json", modules);
    return std::string(ReadSentenceModules(dir_, fresh).message());
  };
  EXPECT_THAT(error(absl::StrCat("[", dense, ",", pooling, "]")),
              HasSubstr("comes before any Pooling module"));
  EXPECT_THAT(error(absl::StrCat("[", pooling, ",", normalize, ",", dense, "]")),
              HasSubstr("after Normalize"));
  EXPECT_THAT(error(R"([{"type": "sentence_transformers.models.WordWeights", "path": "w"}])"),
              HasSubstr("WordWeights' is not supported"));
  EXPECT_THAT(error(R"([{"type": "sentence_transformers.models.Pooling", "path": "../x"}])"),
              HasSubstr("must be a folder inside the model"));
  Write("2_Dense/config.json", R"({"in_features": 8, "out_features": 4})");
  EXPECT_THAT(error(absl::StrCat("[", pooling, ",", dense, "]")),
              HasSubstr("in_features 8 but the module before it gives 16 values"));
}

}  // namespace
}  // namespace sluice::engine::models::encoder
