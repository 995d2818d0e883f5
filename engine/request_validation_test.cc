#include "engine/request_validation.h"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

using ::testing::HasSubstr;

class RequestValidationTest : public ::testing::Test {
 protected:
  RequestValidationTest() {
    config_.name = "m";
    config_.max_batch_size = 8;
    config_.inputs = {TensorSpec{"A", DataType::kFp32, {2}},
                      TensorSpec{"B", DataType::kInt32, {1}}};
    config_.outputs = {TensorSpec{"OUT", DataType::kFp32, {2}}};
  }

  // An input of `batch` rows, with exactly the bytes its shape needs unless `bytes` says.
  TensorView Input(const std::string& name, DataType dtype, Shape shape, int64_t bytes = -1) {
    int64_t elements = 1;
    for (int64_t d : shape) elements *= d;
    const size_t size =
        bytes >= 0 ? static_cast<size_t>(bytes) : elements * DataTypeByteSize(dtype);
    buffers_.push_back(std::make_unique<std::vector<std::byte>>(size));
    return TensorView{name, dtype, std::move(shape), *buffers_.back()};
  }

  std::unique_ptr<InferenceRequest> Request(std::vector<TensorView> inputs) {
    auto request =
        std::make_unique<InferenceRequest>("m", 1, [](absl::StatusOr<InferenceResponse>) {});
    request->inputs = std::move(inputs);
    return request;
  }

  ModelConfig config_;
  std::vector<std::unique_ptr<std::vector<std::byte>>> buffers_;
};

TEST_F(RequestValidationTest, BindsInputsInConfigOrderWithTheBatchSize) {
  auto request =
      Request({Input("B", DataType::kInt32, {3, 1}), Input("A", DataType::kFp32, {3, 2})});
  ASSERT_TRUE(ValidateAndBindRequest(config_, *request).ok());
  EXPECT_EQ(request->inputs[0].name, "A");
  EXPECT_EQ(request->inputs[1].name, "B");
  EXPECT_EQ(request->batch_size, 3);
}

TEST_F(RequestValidationTest, NamesTheFirstMissingInput) {
  auto request = Request({Input("B", DataType::kInt32, {1, 1})});
  const absl::Status status = ValidateAndBindRequest(config_, *request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("missing input 'A' (expected 2 inputs, got 1)"));
}

TEST_F(RequestValidationTest, NamesUnknownAndRepeatedInputsWhateverTheCount) {
  auto unknown = Request({Input("A", DataType::kFp32, {1, 2}), Input("X", DataType::kFp32, {1, 2}),
                          Input("B", DataType::kInt32, {1, 1})});
  EXPECT_THAT(ValidateAndBindRequest(config_, *unknown).message(),
              HasSubstr("has no input named 'X'"));
  auto twice = Request({Input("A", DataType::kFp32, {1, 2}), Input("A", DataType::kFp32, {1, 2})});
  EXPECT_THAT(ValidateAndBindRequest(config_, *twice).message(), HasSubstr("'A' given twice"));
  // Same count as the config: the per-input pass names it.
  auto swapped =
      Request({Input("A", DataType::kFp32, {1, 2}), Input("X", DataType::kInt32, {1, 1})});
  EXPECT_THAT(ValidateAndBindRequest(config_, *swapped).message(),
              HasSubstr("has no input named 'X'"));
}

TEST_F(RequestValidationTest, ChecksTypeShapeBatchAndSize) {
  auto message = [&](std::vector<TensorView> inputs) {
    auto request = Request(std::move(inputs));
    return std::string(ValidateAndBindRequest(config_, *request).message());
  };
  EXPECT_THAT(message({Input("A", DataType::kFp64, {1, 2}), Input("B", DataType::kInt32, {1, 1})}),
              HasSubstr("'A' has data type FP64, the model expects FP32"));
  EXPECT_THAT(message({Input("A", DataType::kFp32, {1, 3}), Input("B", DataType::kInt32, {1, 1})}),
              HasSubstr("'A' has shape [1,3], the model expects [batch<=8]+[2]"));
  EXPECT_THAT(message({Input("A", DataType::kFp32, {9, 2}), Input("B", DataType::kInt32, {9, 1})}),
              HasSubstr("batch size 9, allowed 1..8"));
  EXPECT_THAT(message({Input("A", DataType::kFp32, {2, 2}), Input("B", DataType::kInt32, {1, 1})}),
              HasSubstr("'B' has batch size 1 but another input has 2"));
  EXPECT_THAT(
      message({Input("A", DataType::kFp32, {1, 2}, 7), Input("B", DataType::kInt32, {1, 1})}),
      HasSubstr("'A' holds 7 bytes, shape [1,2] of FP32 needs 8"));
}

TEST_F(RequestValidationTest, ChecksRequestedOutputs) {
  auto request =
      Request({Input("A", DataType::kFp32, {1, 2}), Input("B", DataType::kInt32, {1, 1})});
  request->requested_outputs = {"NOPE"};
  EXPECT_THAT(ValidateAndBindRequest(config_, *request).message(),
              HasSubstr("has no output named 'NOPE'"));
  auto twice = Request({Input("A", DataType::kFp32, {1, 2}), Input("B", DataType::kInt32, {1, 1})});
  twice->requested_outputs = {"OUT", "OUT"};
  EXPECT_THAT(ValidateAndBindRequest(config_, *twice).message(),
              HasSubstr("output 'OUT' requested twice"));
}

}  // namespace
}  // namespace sluice::engine
