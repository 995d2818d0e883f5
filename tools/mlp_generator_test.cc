#include "tools/mlp_generator.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/models/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::tools {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Writes `bytes` to a temporary file and opens it.
absl::StatusOr<engine::models::SafetensorsFile> OpenBytes(const std::string& bytes) {
  static int counter = 0;
  const std::string path = (std::filesystem::path(::testing::TempDir()) /
                            absl::StrCat("mlp_generator_test_", getpid(), "_", counter++))
                               .string();
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
  auto file = engine::models::SafetensorsFile::Open(path);
  std::filesystem::remove(path);  // the mapping keeps the bytes
  return file;
}

TEST(MlpGeneratorTest, ParsesLayerSizes) {
  EXPECT_THAT(ParseLayerSizes("784,512,512,10").value(), ElementsAre(784, 512, 512, 10));
  EXPECT_THAT(ParseLayerSizes("4096*3,10").value(), ElementsAre(4096, 4096, 4096, 10));
  for (const char* bad : {"", "784", "784,,10", "784,-1", "784,x", "7*0,1", "1*2*3,4"}) {
    EXPECT_EQ(ParseLayerSizes(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(std::string(ParseLayerSizes("784,x").status().message()),
              HasSubstr("layer size 'x' in '784,x'"));
  EXPECT_EQ(LayerSizesText({784, 512, 10}), "784,512,10");
}

TEST(MlpGeneratorTest, SameOptionsSameBytesOtherSeedOtherBytes) {
  MlpWeightsOptions options;
  options.layer_sizes = {30, 20, 5};
  const std::string first = GenerateMlpWeights(options).value();
  EXPECT_EQ(GenerateMlpWeights(options).value(), first);
  options.seed = 2;
  EXPECT_NE(GenerateMlpWeights(options).value(), first);
}

TEST(MlpGeneratorTest, LaysOutASequentialStateDictWithinTheInitRange) {
  MlpWeightsOptions options;
  options.layer_sizes = {30, 20, 20, 5};
  options.seed = 7;
  auto file = OpenBytes(GenerateMlpWeights(options).value());
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<std::string> names;
  for (const auto& tensor : file->tensors()) names.push_back(tensor.name);
  EXPECT_THAT(names, ElementsAre("0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"));
  EXPECT_EQ(file->Find("2.weight")->shape, engine::Shape({20, 20}));
  EXPECT_EQ(file->Find("4.bias")->shape, engine::Shape({5}));
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->metadata().at("layers"), "30,20,20,5");
  EXPECT_EQ(file->metadata().at("seed"), "7");
  for (const auto& tensor : file->tensors()) {
    const double fan_in = tensor.name[0] == '0' ? 30 : 20;
    const std::vector<float> values = engine::models::ToFloat32(tensor).value();
    double sum = 0;
    for (float v : values) {
      ASSERT_LE(std::fabs(v), 1 / std::sqrt(fan_in)) << tensor.name;
      sum += v;
    }
    if (values.size() >= 100) {
      EXPECT_LT(std::fabs(sum / values.size()), 0.05) << tensor.name;
    }
  }
}

TEST(MlpGeneratorTest, HalfPrecisionAndNoBias) {
  MlpWeightsOptions options;
  options.layer_sizes = {8, 4};
  options.bias = false;
  for (auto dtype : {engine::DataType::kFp16, engine::DataType::kBf16}) {
    options.dtype = dtype;
    auto file = OpenBytes(GenerateMlpWeights(options).value());
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_EQ(file->tensors().size(), 1u);
    EXPECT_EQ(file->tensors()[0].dtype, dtype);
  }
  options.dtype = engine::DataType::kInt8;
  EXPECT_EQ(GenerateMlpWeights(options).status().code(), absl::StatusCode::kInvalidArgument);
}

// models/mlp/1/model.safetensors is exactly what the generator writes for the bundled options
// (models/mlp/README.md), so anyone can regenerate and check it.
TEST(MlpGeneratorTest, BundledWeightsAreTheGeneratorsOutput) {
  MlpWeightsOptions options;
  options.layer_sizes = {784, 512, 512, 10};
  options.seed = 1;
  options.dtype = engine::DataType::kFp32;
  const std::string generated = GenerateMlpWeights(options).value();
  std::ifstream in(SLUICE_SOURCE_DIR "/models/mlp/1/model.safetensors", std::ios::binary);
  ASSERT_TRUE(in) << "models/mlp/1/model.safetensors is missing";
  std::ostringstream bundled;
  bundled << in.rdbuf();
  ASSERT_EQ(bundled.str().size(), generated.size());
  EXPECT_TRUE(bundled.str() == generated) << "bundled weights differ from the generator's output";
}

}  // namespace
}  // namespace sluice::tools
