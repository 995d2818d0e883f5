// The wire rules other than FP16/BF16 (float16_test.cc): data types, shapes, BYTES framing,
// typed contents.
#include <cstdint>
#include <string>
#include <vector>

#include "common/wire/bytes_elements.h"
#include "common/wire/data_type.h"
#include "common/wire/shape.h"
#include "common/wire/typed_contents.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::wire {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(WireDataTypeTest, NamesAndSizesRoundTrip) {
  for (DataType type :
       {DataType::kBool, DataType::kUint8, DataType::kUint16, DataType::kUint32, DataType::kUint64,
        DataType::kInt8, DataType::kInt16, DataType::kInt32, DataType::kInt64, DataType::kFp16,
        DataType::kBf16, DataType::kFp32, DataType::kFp64, DataType::kBytes}) {
    EXPECT_EQ(DataTypeFromName(DataTypeName(type)), type) << DataTypeName(type);
  }
  EXPECT_EQ(DataTypeFromName("INVALID"), DataType::kInvalid);
  EXPECT_EQ(DataTypeFromName("fp32"), DataType::kInvalid);
  EXPECT_EQ(DataTypeByteSize(DataType::kBf16), 2u);
  EXPECT_EQ(DataTypeByteSize(DataType::kFp64), 8u);
  EXPECT_EQ(DataTypeByteSize(DataType::kBytes), 0u);
}

TEST(WireShapeTest, ElementCountAndByteSize) {
  EXPECT_EQ(*ElementCount({}), 1);
  EXPECT_EQ(*ElementCount({2, 3, 4}), 24);
  EXPECT_EQ(*ElementCount({5, 0}), 0);
  EXPECT_THAT(ElementCount({-1, 16}).status().message(),
              HasSubstr("shape [-1,16] has a negative dimension"));
  EXPECT_THAT(ElementCount({int64_t{1} << 32, int64_t{1} << 32}).status().message(),
              HasSubstr("more elements than fit in 64 bits"));
  EXPECT_EQ(*FixedByteSize(DataType::kFp32, 3), 12u);
  EXPECT_FALSE(FixedByteSize(DataType::kBytes, 3).ok());
  EXPECT_FALSE(FixedByteSize(DataType::kFp64, int64_t{1} << 62).ok());
  EXPECT_EQ(ShapeToString(std::vector<int64_t>{1, 16}), "[1,16]");
}

TEST(WireBytesTest, AppendThenRead) {
  std::string raw;
  AppendBytesElement(raw, "ab");
  AppendBytesElement(raw, "");
  AppendBytesElement(raw, std::string("\0x", 2));
  EXPECT_EQ(raw.size(), 3 * 4 + 4u);
  std::vector<std::byte> bytes;
  AppendBytesElement(bytes, "ab");
  EXPECT_EQ(bytes.size(), 6u);

  BytesElementReader reader(raw);
  std::vector<std::string> elements;
  absl::string_view element;
  while (reader.Next(element)) elements.emplace_back(element);
  EXPECT_EQ(reader.error(), BytesElementReader::Error::kNone);
  EXPECT_EQ(reader.index(), 3);
  EXPECT_EQ(reader.offset(), raw.size());
  EXPECT_THAT(elements, ElementsAre("ab", "", std::string("\0x", 2)));
}

TEST(WireBytesTest, ReportsTruncatedFraming) {
  BytesElementReader short_prefix(absl::string_view("\x02\0\0", 3));
  absl::string_view element;
  EXPECT_FALSE(short_prefix.Next(element));
  EXPECT_EQ(short_prefix.error(), BytesElementReader::Error::kTruncatedLength);
  EXPECT_EQ(short_prefix.index(), 0);

  BytesElementReader short_element(absl::string_view("\x05\0\0\0ab", 6));
  EXPECT_FALSE(short_element.Next(element));
  EXPECT_EQ(short_element.error(), BytesElementReader::Error::kTruncatedElement);
  EXPECT_EQ(short_element.declared_length(), 5u);
  EXPECT_EQ(short_element.remaining(), 2u);
  EXPECT_FALSE(short_element.Next(element));  // stays failed

  // A length near 2^32 must not wrap an offset into "in bounds".
  BytesElementReader huge(
      absl::string_view("\xff\xff\xff\xff"
                        "a",
                        5));
  EXPECT_FALSE(huge.Next(element));
  EXPECT_EQ(huge.error(), BytesElementReader::Error::kTruncatedElement);
}

// A stand-in for inference::InferTensorContents with the same accessors.
struct FakeContents {
  std::vector<bool> bools;
  std::vector<int32_t> ints;
  std::vector<int64_t> int64s;
  std::vector<uint32_t> uints;
  std::vector<uint64_t> uint64s;
  std::vector<float> fp32s;
  std::vector<double> fp64s;
  std::vector<std::string> bytes;
  const std::vector<bool>& bool_contents() const { return bools; }
  const std::vector<int32_t>& int_contents() const { return ints; }
  const std::vector<int64_t>& int64_contents() const { return int64s; }
  const std::vector<uint32_t>& uint_contents() const { return uints; }
  const std::vector<uint64_t>& uint64_contents() const { return uint64s; }
  const std::vector<float>& fp32_contents() const { return fp32s; }
  const std::vector<double>& fp64_contents() const { return fp64s; }
  const std::vector<std::string>& bytes_contents() const { return bytes; }
  int bytes_contents_size() const { return static_cast<int>(bytes.size()); }
};

TEST(WireTypedContentsTest, ConvertsEachTypeToPackedBytes) {
  FakeContents c;
  c.ints = {1, -2};
  c.fp32s = {1.5f};
  c.bools = {true, false};
  c.bytes = {"hi"};
  std::string raw;
  TypedConversion result = TypedContentsToRaw(c, DataType::kInt16, raw);
  EXPECT_EQ(result.error, TypedConversion::Error::kNone);
  EXPECT_EQ(result.field, "int_contents");
  EXPECT_EQ(result.count, 2);
  EXPECT_EQ(raw, std::string("\x01\x00\xfe\xff", 4));

  std::vector<std::byte> out;
  EXPECT_EQ(TypedContentsToRaw(c, DataType::kFp32, out).error, TypedConversion::Error::kNone);
  float value;
  ASSERT_EQ(out.size(), 4u);
  std::memcpy(&value, out.data(), 4);
  EXPECT_EQ(value, 1.5f);

  raw.clear();
  EXPECT_EQ(TypedContentsToRaw(c, DataType::kBool, raw).field, "bool_contents");
  EXPECT_EQ(raw, std::string("\x01\x00", 2));
  raw.clear();
  EXPECT_EQ(TypedContentsToRaw(c, DataType::kBytes, raw).count, 1);
  EXPECT_EQ(raw, std::string("\x02\0\0\0hi", 6));
}

TEST(WireTypedContentsTest, ReportsOutOfRangeAndUntypedFormats) {
  FakeContents c;
  c.ints = {1, 300};
  std::string raw;
  TypedConversion result = TypedContentsToRaw(c, DataType::kInt8, raw);
  EXPECT_EQ(result.error, TypedConversion::Error::kOutOfRange);
  EXPECT_EQ(result.index, 1);
  EXPECT_EQ(result.value, "300");
  c.uints = {256};
  EXPECT_EQ(TypedContentsToRaw(c, DataType::kUint8, raw).error,
            TypedConversion::Error::kOutOfRange);
  EXPECT_EQ(TypedContentsToRaw(c, DataType::kFp16, raw).error,
            TypedConversion::Error::kNoTypedField);
  EXPECT_EQ(TypedContentsToRaw(c, DataType::kBf16, raw).error,
            TypedConversion::Error::kNoTypedField);
  EXPECT_EQ(TypedContentsToRaw(c, DataType::kInvalid, raw).error,
            TypedConversion::Error::kInvalidType);
}

}  // namespace
}  // namespace sluice::wire
