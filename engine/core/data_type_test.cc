#include "engine/core/data_type.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

using ::testing::HasSubstr;

struct TypeCase {
  DataType type;
  const char* name;
  size_t byte_size;
};

const TypeCase kTypeCases[] = {
    {DataType::kBool, "BOOL", 1},     {DataType::kUint8, "UINT8", 1},
    {DataType::kUint16, "UINT16", 2}, {DataType::kUint32, "UINT32", 4},
    {DataType::kUint64, "UINT64", 8}, {DataType::kInt8, "INT8", 1},
    {DataType::kInt16, "INT16", 2},   {DataType::kInt32, "INT32", 4},
    {DataType::kInt64, "INT64", 8},   {DataType::kFp16, "FP16", 2},
    {DataType::kBf16, "BF16", 2},     {DataType::kFp32, "FP32", 4},
    {DataType::kFp64, "FP64", 8},     {DataType::kBytes, "BYTES", 0},
};

TEST(DataTypeTest, NameRoundTripsForEveryType) {
  for (const TypeCase& c : kTypeCases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(DataTypeName(c.type), c.name);
    EXPECT_EQ(DataTypeFromName(c.name), c.type);
    EXPECT_EQ(DataTypeFromName(DataTypeName(c.type)), c.type);
  }
}

TEST(DataTypeTest, ByteSizes) {
  for (const TypeCase& c : kTypeCases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(DataTypeByteSize(c.type), c.byte_size);
  }
  EXPECT_EQ(DataTypeByteSize(DataType::kInvalid), 0u);
}

TEST(DataTypeTest, InvalidHasItsOwnName) { EXPECT_EQ(DataTypeName(DataType::kInvalid), "INVALID"); }

TEST(DataTypeTest, UnknownNamesAreInvalid) {
  for (const char* name :
       {"", "fp32", "Fp32", "FLOAT", "TYPE_FP32", "FP32 ", "INT128", "STRING", "INVALID"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(DataTypeFromName(name), DataType::kInvalid);
  }
}

TEST(TensorTest, ElementCountMultipliesDims) {
  const Shape shape = {2, 3, 4};
  absl::StatusOr<int64_t> count = ElementCount(shape);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 24);
}

TEST(TensorTest, ElementCountOfScalarShapeIsOne) {
  absl::StatusOr<int64_t> count = ElementCount(Shape{});
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 1);
}

TEST(TensorTest, ElementCountWithAZeroDimIsZero) {
  absl::StatusOr<int64_t> count = ElementCount(Shape{4, 0, 7});
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 0);
}

TEST(TensorTest, ElementCountZeroDimDoesNotHideOverflowCheck) {
  // A zero anywhere makes the product 0, even after huge dimensions.
  const int64_t big = std::numeric_limits<int64_t>::max();
  absl::StatusOr<int64_t> count = ElementCount(Shape{0, big, big});
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 0);
}

TEST(TensorTest, ElementCountRejectsNegativeDims) {
  absl::StatusOr<int64_t> count = ElementCount(Shape{2, -1, 3});
  EXPECT_EQ(count.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorTest, ElementCountRejectsOverflow) {
  const int64_t big = int64_t{1} << 32;
  absl::StatusOr<int64_t> count = ElementCount(Shape{big, big});  // 2^64
  EXPECT_EQ(count.status().code(), absl::StatusCode::kInvalidArgument);

  absl::StatusOr<int64_t> fits = ElementCount(Shape{big, big / 2 - 1});  // < 2^63
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(*fits, big * (big / 2 - 1));

  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(ElementCount(Shape{max, 2}).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<int64_t> max_count = ElementCount(Shape{max, 1});
  ASSERT_TRUE(max_count.ok()) << max_count.status();
  EXPECT_EQ(*max_count, max);
}

TEST(TensorTest, FixedByteSizeMultipliesByElementSize) {
  absl::StatusOr<size_t> bytes = FixedByteSize(DataType::kFp32, 16);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, 64u);
  absl::StatusOr<size_t> doubles = FixedByteSize(DataType::kFp64, 3);
  ASSERT_TRUE(doubles.ok()) << doubles.status();
  EXPECT_EQ(*doubles, 24u);
  absl::StatusOr<size_t> none = FixedByteSize(DataType::kInt16, 0);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, 0u);
}

TEST(TensorTest, FixedByteSizeRejectsBytes) {
  absl::StatusOr<size_t> bytes = FixedByteSize(DataType::kBytes, 4);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorTest, FixedByteSizeRejectsInvalidType) {
  EXPECT_EQ(FixedByteSize(DataType::kInvalid, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorTest, FixedByteSizeRejectsOverflow) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(FixedByteSize(DataType::kFp64, max).status().code(),
            absl::StatusCode::kInvalidArgument);
  // 2^62 elements of 4 bytes are 2^64 bytes: one past what size_t holds.
  EXPECT_EQ(FixedByteSize(DataType::kInt32, int64_t{1} << 62).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<size_t> just_fits = FixedByteSize(DataType::kInt32, (int64_t{1} << 62) - 1);
  ASSERT_TRUE(just_fits.ok()) << just_fits.status();
  EXPECT_EQ(*just_fits, std::numeric_limits<size_t>::max() - 3);
}

TEST(TensorTest, FixedByteSizeRejectsNegativeElementCount) {
  EXPECT_EQ(FixedByteSize(DataType::kFp32, -1).status().code(), absl::StatusCode::kInvalidArgument);
}

// Raw BYTES encoding: 4-byte little-endian length, then the bytes.
std::vector<std::byte> EncodeBytes(const std::vector<std::string>& elements) {
  std::vector<std::byte> out;
  for (const std::string& element : elements) {
    const uint32_t length = static_cast<uint32_t>(element.size());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>((length >> (8 * i)) & 0xff));
    for (char c : element) out.push_back(static_cast<std::byte>(c));
  }
  return out;
}

TEST(TensorTest, ValidateBytesElementsAcceptsWellFormedData) {
  const std::vector<std::byte> data = EncodeBytes({"hello", "", "world!"});
  EXPECT_TRUE(ValidateBytesElements("TEXT", data, 3).ok());
}

TEST(TensorTest, ValidateBytesElementsAcceptsZeroElementsOfNothing) {
  EXPECT_TRUE(ValidateBytesElements("TEXT", {}, 0).ok());
}

TEST(TensorTest, ValidateBytesElementsRejectsTruncatedLengthPrefix) {
  std::vector<std::byte> data = EncodeBytes({"ab"});
  data.push_back(std::byte{1});  // 1 byte of a second 4-byte length
  data.push_back(std::byte{0});
  const absl::Status status = ValidateBytesElements("TEXT", data, 2);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("TEXT"));
}

TEST(TensorTest, ValidateBytesElementsRejectsMissingElements) {
  const std::vector<std::byte> data = EncodeBytes({"ab"});
  const absl::Status status = ValidateBytesElements("TEXT", data, 2);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("TEXT"));
}

TEST(TensorTest, ValidateBytesElementsRejectsLengthPastTheEnd) {
  std::vector<std::byte> data = EncodeBytes({"abcdef"});
  data.pop_back();  // declares 6 bytes, holds 5
  const absl::Status status = ValidateBytesElements("TEXT", data, 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("TEXT"));
}

TEST(TensorTest, ValidateBytesElementsRejectsHugeLength) {
  // A length near 2^32 must not wrap an offset computation into "in bounds".
  std::vector<std::byte> data = {std::byte{0xff}, std::byte{0xff}, std::byte{0xff}, std::byte{0xff},
                                 std::byte{'a'}};
  const absl::Status status = ValidateBytesElements("TEXT", data, 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorTest, ValidateBytesElementsRejectsLeftoverBytes) {
  std::vector<std::byte> data = EncodeBytes({"ab", "cd"});
  data.push_back(std::byte{'x'});
  const absl::Status status = ValidateBytesElements("TEXT", data, 2);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("TEXT"));
}

TEST(TensorTest, ValidateBytesElementsRejectsAnExtraWholeElement) {
  const std::vector<std::byte> data = EncodeBytes({"ab", "cd", "ef"});
  const absl::Status status = ValidateBytesElements("TEXT", data, 2);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorTest, ValidateBytesElementsNamesTheTensor) {
  const std::vector<std::byte> data = {std::byte{5}};
  const absl::Status status = ValidateBytesElements("my_input_7", data, 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("my_input_7"));
}

TEST(TensorTest, ShapeToString) {
  EXPECT_EQ(ShapeToString(Shape{1, 16}), "[1,16]");
  EXPECT_EQ(ShapeToString(Shape{}), "[]");
  EXPECT_EQ(ShapeToString(Shape{-1}), "[-1]");
  EXPECT_EQ(ShapeToString(Shape{3, 224, 224}), "[3,224,224]");
}

TEST(TensorTest, TensorViewSeesTheOwnedBytes) {
  Tensor tensor;
  tensor.name = "OUT";
  tensor.dtype = DataType::kInt32;
  tensor.shape = {2};
  tensor.data = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4},
                 std::byte{5}, std::byte{6}, std::byte{7}, std::byte{8}};
  const TensorView view = tensor.View();
  EXPECT_EQ(view.name, "OUT");
  EXPECT_EQ(view.dtype, DataType::kInt32);
  EXPECT_EQ(view.shape, Shape({2}));
  EXPECT_EQ(view.data.data(), tensor.data.data());  // borrowed, not copied
  EXPECT_EQ(view.data.size(), tensor.data.size());
}

}  // namespace
}  // namespace sluice::engine
