#include "loadtest/request_builder.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "client/tensor_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loadtest/echo_service.h"

namespace sluice::loadtest {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// What sluice reports for `identity` (max_batch_size 64, dims [-1]).
inference::ModelMetadataResponse IdentityMetadata() {
  inference::ModelMetadataResponse metadata;
  metadata.set_name("identity");
  auto* input = metadata.add_inputs();
  input->set_name("INPUT0");
  input->set_datatype("FP32");
  input->add_shape(-1);
  input->add_shape(-1);
  auto* output = metadata.add_outputs();
  *output = *input;
  output->set_name("OUTPUT0");
  return metadata;
}

TEST(RequestBuilderTest, ParsesShapeFlags) {
  auto shape = ParseShapeFlag("INPUT0:8,1024");
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(shape->first, "INPUT0");
  EXPECT_THAT(shape->second, ElementsAre(8, 1024));
  EXPECT_FALSE(ParseShapeFlag("INPUT0").ok());
  EXPECT_FALSE(ParseShapeFlag("INPUT0:").ok());
  EXPECT_FALSE(ParseShapeFlag("INPUT0:0").ok());
  EXPECT_FALSE(ParseShapeFlag("INPUT0:-1").ok());
  EXPECT_FALSE(ParseShapeFlag(":4").ok());
}

TEST(RequestBuilderTest, RandomInputsWithShapeAndBatch) {
  RequestSpec spec;
  spec.batch_size = 2;
  spec.shapes["INPUT0"] = {1024};
  absl::StatusOr<inference::ModelInferRequest> request = BuildRequest(IdentityMetadata(), spec);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->model_name(), "identity");
  EXPECT_THAT(request->inputs(0).shape(), ElementsAre(2, 1024));
  EXPECT_EQ(RequestPayloadBytes(*request), 2 * 1024 * 4);
  EXPECT_EQ(DescribeInputs(*request), "INPUT0 FP32 [2,1024]");
  EXPECT_EQ(RequestBatchSize(IdentityMetadata(), *request), 2);
  // Random: not all zeros.
  EXPECT_NE(request->raw_input_contents(0), std::string(8192, '\0'));
}

TEST(RequestBuilderTest, ZerosAndFullShapes) {
  RequestSpec spec;
  spec.fill = InputFill::kZeros;
  spec.shapes["INPUT0"] = {3, 16};  // the full shape, batch included
  absl::StatusOr<inference::ModelInferRequest> request = BuildRequest(IdentityMetadata(), spec);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_THAT(request->inputs(0).shape(), ElementsAre(3, 16));
  EXPECT_EQ(request->raw_input_contents(0), std::string(3 * 16 * 4, '\0'));
}

TEST(RequestBuilderTest, PriorityIsSentOnlyWhenAsked) {
  RequestSpec spec;
  spec.shapes["INPUT0"] = {4};
  absl::StatusOr<inference::ModelInferRequest> plain = BuildRequest(IdentityMetadata(), spec);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->parameters().count("priority"), 0u);
  spec.priority = 2;
  absl::StatusOr<inference::ModelInferRequest> urgent = BuildRequest(IdentityMetadata(), spec);
  ASSERT_TRUE(urgent.ok()) << urgent.status();
  ASSERT_EQ(urgent->parameters().count("priority"), 1u);
  EXPECT_EQ(urgent->parameters().at("priority").uint64_param(), 2u);
}

TEST(RequestBuilderTest, RejectsShapesThatDoNotFit) {
  RequestSpec unknown;
  unknown.shapes["INPUT9"] = {4};
  EXPECT_THAT(std::string(BuildRequest(IdentityMetadata(), unknown).status().message()),
              HasSubstr("INPUT9"));
  inference::ModelMetadataResponse fixed = IdentityMetadata();
  fixed.mutable_inputs(0)->set_shape(1, 16);
  RequestSpec contradicting;
  contradicting.shapes["INPUT0"] = {32};
  EXPECT_FALSE(BuildRequest(fixed, contradicting).ok());
  RequestSpec too_many;
  too_many.shapes["INPUT0"] = {1, 2, 3};
  EXPECT_FALSE(BuildRequest(IdentityMetadata(), too_many).ok());
}

TEST(RequestBuilderTest, InputsFromJson) {
  RequestSpec spec;
  spec.input_json = R"({"inputs": [{"name": "INPUT0", "shape": [2, 2], "data": [1, 2, 3, 4]}]})";
  absl::StatusOr<inference::ModelInferRequest> request = BuildRequest(IdentityMetadata(), spec);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_THAT(request->inputs(0).shape(), ElementsAre(2, 2));
  EXPECT_EQ(RequestBatchSize(IdentityMetadata(), *request), 2);
  spec.batch_size = 4;
  EXPECT_FALSE(BuildRequest(IdentityMetadata(), spec).ok());
}

// What sluice reports for an encoder with token types: [batch, seq] INT64 token inputs.
inference::ModelMetadataResponse EncoderMetadata() {
  inference::ModelMetadataResponse metadata;
  metadata.set_name("embedder");
  for (const char* name : {"input_ids", "attention_mask", "token_type_ids"}) {
    auto* input = metadata.add_inputs();
    input->set_name(name);
    input->set_datatype("INT64");
    input->add_shape(-1);
    input->add_shape(-1);
  }
  return metadata;
}

std::vector<int64_t> Int64s(const inference::ModelInferRequest& request, int input) {
  return *client::FromRawBytes<int64_t>(request.raw_input_contents(input));
}

TEST(RequestTokensTest, CountsTheMaskOrTheIds) {
  inference::ModelInferRequest request;
  ASSERT_TRUE(
      client::AddInput(request, "input_ids", {2, 3}, std::vector<int64_t>{5, 6, 7, 8, 0, 0}).ok());
  EXPECT_EQ(RequestTokens(request), 6);  // no mask: every id is a token
  ASSERT_TRUE(
      client::AddInput(request, "attention_mask", {2, 3}, std::vector<int64_t>{1, 1, 1, 1, 0, 0})
          .ok());
  EXPECT_EQ(RequestTokens(request), 4);  // trailing padding is not
  inference::ModelInferRequest int32_mask;
  ASSERT_TRUE(
      client::AddInput(int32_mask, "attention_mask", {1, 3}, std::vector<int32_t>{1, 0, 1}).ok());
  EXPECT_EQ(RequestTokens(int32_mask), 2);
  inference::ModelInferRequest other;
  ASSERT_TRUE(client::AddInput(other, "INPUT0", {1, 3}, std::vector<float>{1, 2, 3}).ok());
  EXPECT_EQ(RequestTokens(other), 0);
}

TEST(RaggedRequestSourceTest, EachRequestHasItsDrawnLengthOnEveryInput) {
  RequestSpec spec;
  spec.batch_size = 2;
  spec.seed = 9;
  spec.token_id_limit = 4096;
  absl::StatusOr<std::unique_ptr<RaggedRequestSource>> source =
      RaggedRequestSource::Create(EncoderMetadata(), spec, client::LengthRange{8, 256});
  ASSERT_TRUE(source.ok()) << source.status();
  int64_t shortest = 1 << 30, longest = 0;
  for (uint64_t k = 0; k < 300; ++k) {
    std::shared_ptr<const inference::ModelInferRequest> request = (*source)->Make(k);
    const int64_t length = (*source)->Length(k);
    EXPECT_EQ(length, client::DrawLength(client::LengthRange{8, 256}, 9, k));
    shortest = std::min(shortest, length);
    longest = std::max(longest, length);
    EXPECT_EQ(request->model_name(), "embedder");
    ASSERT_EQ(request->inputs_size(), 3);
    ASSERT_EQ(request->raw_input_contents_size(), 3);
    for (int i = 0; i < 3; ++i) {
      EXPECT_THAT(request->inputs(i).shape(), ElementsAre(2, length)) << k;
      EXPECT_EQ(request->raw_input_contents(i).size(), static_cast<size_t>(2 * length * 8)) << k;
    }
    for (int64_t id : Int64s(*request, 0)) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, 4096);
    }
    EXPECT_THAT(Int64s(*request, 1), Each(1));
    EXPECT_THAT(Int64s(*request, 2), Each(0));
    EXPECT_EQ(RequestTokens(*request), 2 * length);
  }
  EXPECT_LT(shortest, 20);
  EXPECT_GT(longest, 240);
  // The probe: the longest length.
  EXPECT_THAT((*source)->MakeLongest()->inputs(0).shape(), ElementsAre(2, 256));
  EXPECT_EQ((*source)->Describe(),
            "input_ids INT64 [2,8..256]; attention_mask INT64 [2,8..256]; "
            "token_type_ids INT64 [2,8..256]");
}

TEST(RaggedRequestSourceTest, TheSameSeedMakesTheSameRequests) {
  RequestSpec spec;
  spec.seed = 5;
  auto a = RaggedRequestSource::Create(EncoderMetadata(), spec, client::LengthRange{8, 64});
  auto b = RaggedRequestSource::Create(EncoderMetadata(), spec, client::LengthRange{8, 64});
  spec.seed = 6;
  auto c = RaggedRequestSource::Create(EncoderMetadata(), spec, client::LengthRange{8, 64});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  int differ = 0;
  for (uint64_t k = 0; k < 50; ++k) {
    EXPECT_EQ((*a)->Make(k)->SerializeAsString(), (*b)->Make(k)->SerializeAsString()) << k;
    differ += (*a)->Make(k)->SerializeAsString() != (*c)->Make(k)->SerializeAsString() ? 1 : 0;
  }
  EXPECT_GT(differ, 40);
  // Two requests of one length need not carry the same ids (each is its own slice).
  std::map<int64_t, std::string> first_ids;
  int same_length_different_ids = 0;
  for (uint64_t k = 0; k < 400; ++k) {
    std::shared_ptr<const inference::ModelInferRequest> request = (*a)->Make(k);
    auto [it, inserted] = first_ids.emplace((*a)->Length(k), request->raw_input_contents(0));
    if (!inserted && it->second != request->raw_input_contents(0)) ++same_length_different_ids;
  }
  EXPECT_GT(same_length_different_ids, 100);
}

TEST(RaggedRequestSourceTest, RefusesWhatItCannotVary) {
  RequestSpec spec;
  // Every -1 fixed by --shape: nothing to vary.
  spec.shapes["INPUT0"] = {16};
  absl::StatusOr<std::unique_ptr<RaggedRequestSource>> fixed =
      RaggedRequestSource::Create(IdentityMetadata(), spec, client::LengthRange{8, 64});
  ASSERT_FALSE(fixed.ok());
  EXPECT_THAT(std::string(fixed.status().message()), HasSubstr("no -1 dimension"));
  // A JSON file fixes its own shapes.
  RequestSpec json;
  json.input_json = R"({"inputs": [{"name": "input_ids", "shape": [1, 2], "data": [1, 2]}]})";
  EXPECT_FALSE(
      RaggedRequestSource::Create(EncoderMetadata(), json, client::LengthRange{8, 64}).ok());
  // The bound on what is made once: 3 INT64 inputs at 2 x 2^20 tokens x batch 64 = 3 GiB.
  RequestSpec big;
  big.batch_size = 64;
  absl::StatusOr<std::unique_ptr<RaggedRequestSource>> huge =
      RaggedRequestSource::Create(EncoderMetadata(), big, client::LengthRange{8, int64_t{1} << 20});
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr("--batch-size"));
  // BYTES inputs with a sequence dimension cannot be sliced.
  inference::ModelMetadataResponse bytes = IdentityMetadata();
  bytes.mutable_inputs(0)->set_datatype("BYTES");
  EXPECT_THAT(
      std::string(RaggedRequestSource::Create(bytes, RequestSpec{}, client::LengthRange{8, 64})
                      .status()
                      .message()),
      HasSubstr("BYTES"));
}

TEST(EchoInferTest, ReturnsInputsAsOutputs) {
  EXPECT_EQ(EchoOutputName("INPUT0"), "OUTPUT0");
  EXPECT_EQ(EchoOutputName("x_INPUT"), "x_OUTPUT");
  EXPECT_EQ(EchoOutputName("tokens"), "tokens");

  inference::ModelInferRequest request;
  request.set_model_name("anything");
  request.set_id("42");
  ASSERT_TRUE(client::AddInput(request, "INPUT0", {1, 3}, std::vector<float>{1, 2, 3}).ok());
  ASSERT_TRUE(client::AddInput(request, "INPUT1", {2}, std::vector<int32_t>{7, 8}).ok());
  inference::ModelInferResponse response;
  ASSERT_TRUE(EchoInfer(request, response).ok());
  EXPECT_EQ(response.id(), "42");
  EXPECT_EQ(response.model_name(), "anything");
  absl::StatusOr<client::OutputTensor> out0 = client::DecodeOutput(response, "OUTPUT0");
  ASSERT_TRUE(out0.ok()) << out0.status();
  EXPECT_THAT(*out0->As<float>(), ElementsAre(1, 2, 3));
  EXPECT_THAT(out0->shape, ElementsAre(1, 3));
  absl::StatusOr<client::OutputTensor> out1 = client::DecodeOutput(response, "OUTPUT1");
  ASSERT_TRUE(out1.ok()) << out1.status();
  EXPECT_THAT(*out1->As<int32_t>(), ElementsAre(7, 8));

  request.add_raw_input_contents("extra");
  inference::ModelInferResponse bad;
  EXPECT_FALSE(EchoInfer(request, bad).ok());
}

TEST(EchoInferTest, ValidatesModelOptions) {
  EXPECT_TRUE(ValidateEchoModelOptions(EchoModelOptions{}).ok());
  EchoModelOptions options;
  options.datatype = "FP31";
  EXPECT_FALSE(ValidateEchoModelOptions(options).ok());
  options = EchoModelOptions{};
  options.metadata_shape = {4, 4};  // batching needs a leading -1
  EXPECT_FALSE(ValidateEchoModelOptions(options).ok());
  options.max_batch_size = 0;
  EXPECT_TRUE(ValidateEchoModelOptions(options).ok());
}

}  // namespace
}  // namespace sluice::loadtest
