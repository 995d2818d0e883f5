#include "engine/request_validation.h"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/engine/fake_device_memory.h"

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

// Inputs in device memory (a CUDA shared-memory region): sized by their DeviceBytes, bound like
// host inputs, and refused where the host would have to read them.
TEST_F(RequestValidationTest, DeviceInputsAreSizedByTheirDeviceBytes) {
  auto memory = std::make_shared<testing::FakeDeviceMemory>(std::vector<std::byte>(64));
  TensorView a{"A", DataType::kFp32, {3, 2}};
  a.device = testing::FakeDeviceMemory::Bytes(memory, 16, 24);
  auto request = Request({Input("B", DataType::kInt32, {3, 1}), a});
  ASSERT_TRUE(ValidateAndBindRequest(config_, *request).ok());
  ASSERT_EQ(request->inputs[0].name, "A");
  EXPECT_TRUE(request->inputs[0].on_device());
  EXPECT_EQ(request->inputs[0].byte_size(), 24u);
  EXPECT_EQ(request->inputs[0].device->address(),
            static_cast<const std::byte*>(memory->device_address()) + 16);
  EXPECT_EQ(request->batch_size, 3);

  // Its byte size against the shape, as for host bytes.
  TensorView short_a{"A", DataType::kFp32, {3, 2}};
  short_a.device = testing::FakeDeviceMemory::Bytes(memory, 0, 20);
  request = Request({Input("B", DataType::kInt32, {3, 1}), short_a});
  absl::Status status = ValidateAndBindRequest(config_, *request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("input 'A' holds 20 bytes"));
}

TEST_F(RequestValidationTest, RefusesMalformedDeviceInputs) {
  auto memory = std::make_shared<testing::FakeDeviceMemory>(std::vector<std::byte>(64));
  const auto refused = [&](TensorView a, const std::string& why) {
    SCOPED_TRACE(why);
    auto request = Request({Input("B", DataType::kInt32, {1, 1}), std::move(a)});
    const absl::Status status = ValidateAndBindRequest(config_, *request);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("model 'm'"));
    EXPECT_THAT(status.message(), HasSubstr(why));
  };
  // A range past the mapping, and one whose end overflows 64 bits.
  TensorView past{"A", DataType::kFp32, {1, 2}};
  past.device = testing::FakeDeviceMemory::Bytes(memory, 60, 8);
  refused(past, "runs past its mapping's 64 bytes");
  TensorView wraps{"A", DataType::kFp32, {1, 2}};
  wraps.device = testing::FakeDeviceMemory::Bytes(memory, ~uint64_t{0} - 3, 8);
  refused(wraps, "runs past its mapping's 64 bytes");
  // No mapping, or nothing that keeps it open.
  TensorView no_memory{"A", DataType::kFp32, {1, 2}};
  no_memory.device = DeviceBytes{.byte_size = 8, .keepalive = memory};
  refused(no_memory, "without the mapping");
  TensorView no_keepalive{"A", DataType::kFp32, {1, 2}};
  no_keepalive.device = DeviceBytes{.memory = memory.get(), .byte_size = 8};
  refused(no_keepalive, "without the mapping");
  // Host and device bytes at once.
  TensorView both = Input("A", DataType::kFp32, {1, 2});
  both.device = testing::FakeDeviceMemory::Bytes(memory, 0, 8);
  refused(both, "both host and device bytes");

  // BYTES: their framing is checked on the host.
  ModelConfig text = config_;
  text.inputs = {TensorSpec{"T", DataType::kBytes, {1}}};
  TensorView t{"T", DataType::kBytes, {1, 1}};
  t.device = testing::FakeDeviceMemory::Bytes(memory, 0, 8);
  auto request = Request({t});
  const absl::Status status = ValidateAndBindRequest(text, *request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("input 'T' is BYTES in device memory"));
}

TEST_F(RequestValidationTest, ModelsThatReadValuesAtSubmitRefuseDeviceInputs) {
  auto memory = std::make_shared<testing::FakeDeviceMemory>(std::vector<std::byte>(64));
  auto host = Request({Input("A", DataType::kFp32, {1, 2}), Input("B", DataType::kInt32, {1, 1})});
  EXPECT_TRUE(RefuseDeviceInputs(config_, *host).ok());
  TensorView a{"A", DataType::kFp32, {1, 2}};
  a.device = testing::FakeDeviceMemory::Bytes(memory, 0, 8);
  auto device = Request({Input("B", DataType::kInt32, {1, 1}), a});
  const absl::Status status = RefuseDeviceInputs(config_, *device);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("model 'm' checks its input values on the host"));
  EXPECT_THAT(status.message(), HasSubstr("input 'A' is in device memory"));
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
