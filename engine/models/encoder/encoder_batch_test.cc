// The device-neutral parts the CPU and CUDA encoders share (encoder_batch.h): the GPU
// parameters' parsing and defaults (checked on every backend), and packing a request.

#include "engine/models/encoder/encoder_batch.h"

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::engine::models::encoder {
namespace {

using ::testing::HasSubstr;

ModelConfig Config(int max_batch_size, std::map<std::string, std::string> parameters = {}) {
  ModelConfig config;
  config.name = "m";
  config.backend = "encoder";
  config.max_batch_size = max_batch_size;
  config.parameters = std::move(parameters);
  return config;
}

TEST(GpuOptionsTest, DefaultsFollowTheTokenBudgetInQuarters) {
  auto options = ParseGpuOptions(Config(64), 8192);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->compute, ComputeType::kCheckpoint);
  EXPECT_FALSE(options->allow_tf32);
  EXPECT_EQ(options->buckets,
            (std::vector<TokenBucket>{{64, 128}, {64, 512}, {64, 2048}, {64, 8192}}));
  // Fewer sequences than tokens allow: a bucket never holds more sequences than tokens.
  options = ParseGpuOptions(Config(32), 64);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->buckets, (std::vector<TokenBucket>{{16, 16}, {32, 64}}));
  // More sequences allowed than tokens: a full batch has at most max_batch_tokens sequences.
  options = ParseGpuOptions(Config(64), 32);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->buckets, (std::vector<TokenBucket>{{32, 32}}));
  // A tiny budget: one bucket (the quarters below 16 tokens are dropped).
  options = ParseGpuOptions(Config(4), 20);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->buckets, (std::vector<TokenBucket>{{4, 20}}));
}

TEST(GpuOptionsTest, ParsesTheParametersAndSortsTheBuckets) {
  auto options = ParseGpuOptions(Config(8, {{"compute_type", "fp16"},
                                            {"allow_tf32", "true"},
                                            {"cuda_buckets", " 8x256, 1x16,4x64,1x16"}}),
                                 256);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->compute, ComputeType::kFp16);
  EXPECT_TRUE(options->allow_tf32);
  // Sorted by tokens, duplicates dropped.
  EXPECT_EQ(options->buckets, (std::vector<TokenBucket>{{1, 16}, {4, 64}, {8, 256}}));
  for (const char* name : {"checkpoint", "fp32", "bf16"}) {
    EXPECT_TRUE(ParseGpuOptions(Config(8, {{"compute_type", name}}), 256).ok()) << name;
  }
}

TEST(GpuOptionsTest, BadValuesNameTheParameterAndTheLimit) {
  auto error = [](std::map<std::string, std::string> parameters, int64_t tokens = 256) {
    absl::StatusOr<GpuOptions> options = ParseGpuOptions(Config(8, std::move(parameters)), tokens);
    EXPECT_TRUE(absl::IsInvalidArgument(options.status())) << options.status();
    return std::string(options.status().message());
  };
  EXPECT_THAT(error({{"compute_type", "fp8"}}),
              HasSubstr("'compute_type' = 'fp8' must be one of checkpoint, fp32, fp16, bf16"));
  EXPECT_THAT(error({{"allow_tf32", "yes"}}), HasSubstr("'allow_tf32' = 'yes'"));
  EXPECT_THAT(error({{"cuda_buckets", "8x"}}), HasSubstr("'8x' is not SEQUENCESxTOKENS"));
  EXPECT_THAT(error({{"cuda_buckets", "9x4"}}), HasSubstr("1 <= sequences <= tokens"));
  EXPECT_THAT(error({{"cuda_buckets", "0x4"}}), HasSubstr("not SEQUENCESxTOKENS"));
  EXPECT_THAT(error({{"cuda_buckets", ","}}), HasSubstr("lists no bucket"));
  EXPECT_THAT(error({{"cuda_buckets", "1x1,1x2,1x3,1x4,1x5,1x6,1x7,1x8,8x256"}}),
              HasSubstr("lists 9 buckets; at most 8"));
  // The batcher forms batches of max_batch_size sequences and max_batch_tokens tokens: some
  // bucket must hold one.
  EXPECT_THAT(error({{"cuda_buckets", "8x128,4x256"}}),
              HasSubstr("no bucket holds a full batch of 8 sequences (max_batch_size) and 256 "
                        "tokens (max_batch_tokens); add a bucket 8x256"));
}

std::vector<std::byte> Int64Bytes(const std::vector<int64_t>& values) {
  std::vector<std::byte> bytes(values.size() * 8);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

TEST(PackRequestTest, PacksRowsUpToTheMasksLastOneWithRobertaPositions) {
  EncoderNetwork net;
  net.arch = EncoderArch::kRoberta;
  net.pad_token_id = 1;
  net.position_offset = 2;  // pad_token_id + 1, as ReadConfigJson sets it for RoBERTa
  // Two rows of 4: the first with an inner pad (id 1, mask 0) and trailing padding, the second
  // full.
  const std::vector<std::byte> ids = Int64Bytes({5, 1, 7, 1, 8, 9, 10, 11});
  const std::vector<std::byte> mask = Int64Bytes({1, 0, 1, 0, 1, 1, 1, 1});
  const TensorView id_view{kInputIdsName, DataType::kInt64, {2, 4}, ids};
  const TensorView mask_view{kAttentionMaskName, DataType::kInt64, {2, 4}, mask};
  const std::vector<TensorView> inputs = {id_view, mask_view};
  const RequestTokens tokens = FindRequestTokens(inputs);
  PackedBatch batch;
  auto shape = PackRequest(net, tokens, batch);
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(shape->rows, 2);
  EXPECT_EQ(shape->seq, 4);
  EXPECT_EQ(batch.offsets, (std::vector<int64_t>{0, 3, 7}));
  EXPECT_EQ(batch.token_ids, (std::vector<int32_t>{5, 1, 7, 8, 9, 10, 11}));
  EXPECT_EQ(batch.attend, (std::vector<uint8_t>{1, 0, 1, 1, 1, 1, 1}));
  // Pads sit at pad_token_id; the others count on from pad_token_id + 1.
  EXPECT_EQ(batch.positions, (std::vector<int32_t>{2, 1, 3, 2, 3, 4, 5}));
  EXPECT_EQ(batch.token_types, (std::vector<int32_t>(7, 0)));
}

}  // namespace
}  // namespace sluice::engine::models::encoder
