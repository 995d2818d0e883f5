// Issue 17 item 3: a model config must not be able to end the process. Each case here made the
// load throw (std::bad_alloc, std::system_error) before the limits; now it is that model's load
// error, checked before anything is allocated, and the other models keep serving.

#include "engine/core/load_limits.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

ModelConfig Identity(const std::string& name, Shape dims, int max_batch_size) {
  ModelConfig config;
  config.name = name;
  config.backend = "identity";
  config.max_batch_size = max_batch_size;
  config.inputs = {{"INPUT0", DataType::kFp32, dims}};
  config.outputs = {{"OUTPUT0", DataType::kFp32, dims}};
  return config;
}

TEST(LoadLimitsTest, HugeDimsAreRefusedNamingModelTensorAndFlag) {
  absl::Status status = CheckLoadLimits(Identity("big", {int64_t{1} << 40}, 0), LoadLimits{});
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("model 'big'"), HasSubstr("input 'INPUT0'"),
                    HasSubstr("max_tensor_bytes"), HasSubstr("--max-tensor-bytes")));
}

TEST(LoadLimitsTest, WarmUpBatchCountsMaxBatchSizeRows) {
  // 2^28 floats are 1 GiB per row: fine alone, 64 GiB at max_batch_size 64 (warm-up's batch).
  EXPECT_FALSE(CheckLoadLimits(Identity("wide", {int64_t{1} << 28}, 64), LoadLimits{}).ok());
  LoadLimits roomy;
  roomy.max_tensor_bytes = roomy.max_batch_bytes = roomy.max_load_bytes = int64_t{1} << 40;
  EXPECT_TRUE(CheckLoadLimits(Identity("wide", {int64_t{1} << 28}, 1), roomy).ok());
}

TEST(LoadLimitsTest, DimsProductOverflowNamesModelAndTensor) {
  absl::Status status =
      CheckLoadLimits(Identity("overflow", {int64_t{1} << 40, int64_t{1} << 40}, 0), LoadLimits{});
  EXPECT_THAT(status.message(), AllOf(HasSubstr("model 'overflow'"), HasSubstr("input 'INPUT0'"),
                                      HasSubstr("overflows 64 bits")));
}

TEST(LoadLimitsTest, MaxBatchSizeInstancesThreadsAndLoadBytesAreBounded) {
  ModelConfig config = Identity("m", {4}, 2147483647);
  EXPECT_THAT(CheckLoadLimits(config, LoadLimits{}).message(),
              AllOf(HasSubstr("max_batch_size"), HasSubstr("--max-model-batch-size")));

  config = Identity("m", {4}, 8);
  config.instance_count = 1500;
  EXPECT_THAT(CheckLoadLimits(config, LoadLimits{}).message(),
              AllOf(HasSubstr("instance_group count"), HasSubstr("1500"),
                    HasSubstr("--max-model-instances")));
  LoadLimits limits;
  limits.max_instances = 2000;
  EXPECT_THAT(CheckLoadLimits(config, limits).message(),
              AllOf(HasSubstr("threads"), HasSubstr("3001"), HasSubstr("--max-model-threads")));

  // 16 instances of a 256 MiB batch: 4 GiB + the outputs is over max_load_bytes.
  config = Identity("m", {int64_t{1} << 24}, 2);  // 64 MiB per row, 128 MiB per tensor
  config.instance_count = 17;
  EXPECT_THAT(CheckLoadLimits(config, LoadLimits{}).message(),
              AllOf(HasSubstr("memory of the load"), HasSubstr("--max-model-load-bytes")));
  config.instance_count = 1;
  EXPECT_TRUE(CheckLoadLimits(config, LoadLimits{}).ok());
}

TEST(LoadLimitsTest, SaturatingArithmetic) {
  EXPECT_EQ(SaturatingMul(int64_t{1} << 40, int64_t{1} << 40), INT64_MAX);
  EXPECT_EQ(SaturatingMul(0, INT64_MAX), 0);
  EXPECT_EQ(SaturatingAdd(INT64_MAX, 1), INT64_MAX);
  EXPECT_EQ(SaturatingAdd(2, 3), 5);
}

// A two-layer mlp file: 0.weight [width, in], 1.weight [out, width], FP32 zeros.
std::string WriteMlp(const std::filesystem::path& dir, int in, int width, int out) {
  std::filesystem::create_directories(dir);
  const int64_t first = int64_t{4} * width * in;
  const int64_t second = int64_t{4} * out * width;
  const std::string header =
      absl::StrCat(R"({"0.weight":{"dtype":"F32","shape":[)", width, ",", in,
                   R"(],"data_offsets":[0,)", first, R"(]},"1.weight":{"dtype":"F32","shape":[)",
                   out, ",", width, R"(],"data_offsets":[)", first, ",", first + second, "]}}");
  std::ofstream file(dir / "model.safetensors", std::ios::binary);
  const uint64_t length = header.size();
  file.write(reinterpret_cast<const char*>(&length), 8);
  file << header << std::string(first + second, '\0');
  return dir.string();
}

class LoadLimitsEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / absl::StrCat("sluice_load_limits_test_", getpid());
    engine_ = *Engine::Create({});
  }
  void TearDown() override {
    engine_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(LoadLimitsEngineTest, BadConfigsFailAloneAndOthersServe) {
  ASSERT_TRUE(engine_->LoadModel({Identity("good", {4}, 8), 1, ""}).ok());
  // Each of these ended the process before (bad_alloc at warm-up; 3,000 threads).
  EXPECT_TRUE(absl::IsInvalidArgument(
      engine_->LoadModel({Identity("huge", {int64_t{1} << 40}, 0), 1, ""})));
  EXPECT_TRUE(absl::IsInvalidArgument(
      engine_->LoadModel({Identity("wide", {int64_t{1} << 28}, 64), 1, ""})));
  ModelConfig many = Identity("many", {4}, 8);
  many.instance_count = 1500;
  EXPECT_TRUE(absl::IsInvalidArgument(engine_->LoadModel({many, 1, ""})));
  EXPECT_TRUE(engine_->IsModelReady("good", 1));
  EXPECT_FALSE(engine_->IsModelReady("huge", 1));
}

TEST_F(LoadLimitsEngineTest, MlpScratchIsCheckedBeforeItIsAllocated) {
  ModelConfig config;
  config.name = "mlp";
  config.backend = "mlp";
  config.inputs = {{"INPUT0", DataType::kFp32, {2}}};
  config.outputs = {{"OUTPUT0", DataType::kFp32, {3}}};
  const std::string path = WriteMlp(dir_ / "1", 2, 262144, 3);
  // The issue's case: 2^31-1 rows, scratch sized up front (terabytes). Refused by its batch size.
  config.max_batch_size = 2147483647;
  EXPECT_TRUE(absl::IsInvalidArgument(engine_->LoadModel({config, 1, path})));
  // Within every config-only limit (a 1.3 MB batch), the scratch is not: 65,536 rows of a
  // 262,144-wide layer, twice, is 128 GiB (more than any machine here: before the check it was
  // std::bad_alloc, which ended the process). Checked from the file's shapes, before allocating.
  config.max_batch_size = 65536;
  ModelSpec spec{config, 1, path};
  absl::Status status = engine_->LoadModel(spec);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("widest layer, 262144"), HasSubstr("--max-model-load-bytes")));
  spec.config.max_batch_size = 64;
  EXPECT_TRUE(engine_->LoadModel(spec).ok());
}

TEST(LoadExceptionStatusTest, NamesModelVersionAndException) {
  absl::Status status = LoadExceptionStatus("m", 3, std::bad_alloc());
  EXPECT_TRUE(absl::IsResourceExhausted(status));
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("model 'm' version 3"), HasSubstr("out of memory")));
}

}  // namespace
}  // namespace sluice::engine
