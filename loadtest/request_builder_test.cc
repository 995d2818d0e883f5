#include "loadtest/request_builder.h"

#include "client/tensor_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loadtest/echo_service.h"

namespace sluice::loadtest {
namespace {

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
