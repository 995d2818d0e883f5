#include "engine/models/safetensors.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/wire/float16.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::engine::models {

using wire::BFloat16ToFloat;
using wire::FloatToBFloat16;
using wire::FloatToHalf;
using wire::HalfToFloat;
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

template <typename T>
std::vector<std::byte> Bytes(const std::vector<T>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(T));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// A file in a fresh temporary folder, removed with the fixture.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("safetensors_test_", getpid(), "_", counter_++);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string WriteBytes(const std::string& bytes, const std::string& name = "m.safetensors") {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
    return path;
  }

  // A file with `header` as its JSON text (no validation: for broken files) and `data_bytes`
  // bytes of data.
  std::string WriteRaw(const std::string& header, size_t data_bytes) {
    std::string file;
    const uint64_t length = header.size();
    for (int i = 0; i < 8; ++i) file.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
    file += header;
    file.append(data_bytes, '\x11');
    return WriteBytes(file);
  }

  // Opens a broken file and returns the error message (expects InvalidArgument).
  std::string OpenError(const std::string& path) {
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    EXPECT_FALSE(file.ok());
    if (file.ok()) return "";
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
    // Every error names the file.
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(path));
    return std::string(file.status().message());
  }

  std::string OpenRawError(const std::string& header, size_t data_bytes) {
    return OpenError(WriteRaw(header, data_bytes));
  }

  static inline int counter_ = 0;
  std::filesystem::path dir_;
};

TEST_F(SafetensorsTest, WritesAndReadsBack) {
  const std::vector<float> weight = {1.f, -2.f, 3.5f, 4.f, 5.f, 6.f};
  const std::vector<uint16_t> half = {FloatToHalf(0.5f), FloatToHalf(-1.25f)};
  const std::vector<int64_t> ids = {7, -9, 1LL << 40};
  const std::vector<std::byte> weight_bytes = Bytes(weight);
  const std::vector<std::byte> half_bytes = Bytes(half);
  const std::vector<std::byte> id_bytes = Bytes(ids);
  const std::vector<TensorView> views = {
      {"0.weight", DataType::kFp32, {2, 3}, weight_bytes},
      {"0.bias", DataType::kFp16, {2}, half_bytes},
      {"ids", DataType::kInt64, {3}, id_bytes},
      {"empty", DataType::kFp32, {0, 4}, {}},
  };

  absl::StatusOr<std::string> bytes = SerializeSafetensors(views, {{"format", "pt"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes->data(), 8);
  EXPECT_EQ(header_length % 8, 0u) << "the data section starts 8-byte aligned";
  EXPECT_EQ(bytes->substr(8, 13), R"({"0.bias":{"d)");  // compact, keys sorted

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(WriteBytes(*bytes));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  ASSERT_EQ(file->tensors().size(), 4u);
  // In data order: the order they were written.
  EXPECT_EQ(file->tensors()[0].name, "0.weight");
  const TensorView* w = file->Find("0.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DataType::kFp32);
  EXPECT_EQ(w->shape, Shape({2, 3}));
  EXPECT_EQ(ToFloat32(*w).value(), weight);
  const TensorView* b = file->Find("0.bias");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(ToFloat32(*b).value(), std::vector<float>({0.5f, -1.25f}));
  const TensorView* i = file->Find("ids");
  ASSERT_NE(i, nullptr);
  EXPECT_EQ(i->dtype, DataType::kInt64);
  ASSERT_EQ(i->data.size(), 24u);
  EXPECT_EQ(std::memcmp(i->data.data(), ids.data(), 24), 0);
  EXPECT_EQ(file->Find("empty")->data.size(), 0u);
  EXPECT_EQ(file->Find("nope"), nullptr);

  // Moving the file keeps the views valid (they point into the mapping, not the object).
  SafetensorsFile moved = *std::move(file);
  EXPECT_EQ(ToFloat32(*moved.Find("0.weight")).value(), weight);
}

TEST_F(SafetensorsTest, SerializationIsDeterministic) {
  const std::vector<std::byte> data = Bytes(std::vector<float>{1, 2});
  const std::vector<TensorView> tensors = {{"a", DataType::kFp32, {2}, data}};
  EXPECT_EQ(SerializeSafetensors(tensors, {{"k", "v"}}).value(),
            SerializeSafetensors(tensors, {{"k", "v"}}).value());
}

TEST_F(SafetensorsTest, ToFloat32ConvertsHalfBFloat16AndDouble) {
  const std::vector<uint16_t> bf = {FloatToBFloat16(1.5f), FloatToBFloat16(-3.f)};
  const std::vector<double> f64 = {0.25, 1e-3};
  const std::vector<std::byte> bf_bytes = Bytes(bf);
  const std::vector<std::byte> f64_bytes = Bytes(f64);
  EXPECT_EQ(ToFloat32({"bf", DataType::kBf16, {2}, bf_bytes}).value(),
            std::vector<float>({1.5f, -3.f}));
  EXPECT_EQ(ToFloat32({"d", DataType::kFp64, {2}, f64_bytes}).value(),
            std::vector<float>({0.25f, 1e-3f}));
  const std::vector<std::byte> ints = Bytes(std::vector<int32_t>{1});
  absl::StatusOr<std::vector<float>> refused = ToFloat32({"i", DataType::kInt32, {1}, ints});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("tensor 'i': dtype I32 is not a floating-point type"));
  absl::StatusOr<std::vector<float>> short_data = ToFloat32({"s", DataType::kFp32, {2}, ints});
  EXPECT_THAT(std::string(short_data.status().message()), HasSubstr("holds 4 bytes"));
}

TEST_F(SafetensorsTest, SerializeRefusesBadTensors) {
  const std::vector<std::byte> four = Bytes(std::vector<float>{1});
  const std::vector<TensorView> repeated = {{"a", DataType::kFp32, {1}, four},
                                            {"a", DataType::kFp32, {1}, four}};
  EXPECT_THAT(std::string(SerializeSafetensors(repeated).status().message()),
              HasSubstr("name given twice"));
  const std::vector<TensorView> wrong_size = {{"a", DataType::kFp32, {2}, four}};
  EXPECT_THAT(std::string(SerializeSafetensors(wrong_size).status().message()),
              HasSubstr("holds 4 bytes, shape [2] needs 8"));
  const std::vector<TensorView> bytes_type = {{"s", DataType::kBytes, {1}, four}};
  EXPECT_THAT(std::string(SerializeSafetensors(bytes_type).status().message()),
              HasSubstr("no safetensors name"));
}

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open((dir_ / "absent").string());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("does not exist"));
}

TEST_F(SafetensorsTest, DirectoryIsRefused) {
  EXPECT_THAT(OpenError(dir_.string()), HasSubstr("not a regular file"));
}

TEST_F(SafetensorsTest, FileShorterThanTheLengthField) {
  EXPECT_THAT(OpenError(WriteBytes("abc")), HasSubstr("3 bytes long, too short"));
  EXPECT_THAT(OpenError(WriteBytes("")), HasSubstr("0 bytes long"));
}

TEST_F(SafetensorsTest, HeaderLengthBeyondTheFile) {
  // A valid file cut inside its header: the length field promises more than there is.
  const std::vector<std::byte> data = Bytes(std::vector<float>(4, 1.f));
  const std::vector<TensorView> tensors = {{"0.weight", DataType::kFp32, {2, 2}, data}};
  std::string bytes = SerializeSafetensors(tensors).value();
  EXPECT_THAT(OpenError(WriteBytes(bytes.substr(0, 20))),
              AllOf(HasSubstr("header length"), HasSubstr("exceeds the 12 bytes")));
  // A length of 2^64 - 1 must not wrap around.
  EXPECT_THAT(OpenError(WriteBytes(std::string(8, '\xff') + "{}")), HasSubstr("header length"));
}

TEST_F(SafetensorsTest, TruncatedDataSection) {
  const std::vector<std::byte> data = Bytes(std::vector<float>(16, 1.f));
  const std::vector<TensorView> tensors = {{"0.weight", DataType::kFp32, {4, 4}, data}};
  std::string bytes = SerializeSafetensors(tensors).value();
  bytes.resize(bytes.size() - 10);
  EXPECT_THAT(OpenError(WriteBytes(bytes)),
              AllOf(HasSubstr("tensor '0.weight'"), HasSubstr("data_offsets [0, 64]"),
                    HasSubstr("beyond the data section (54 bytes; truncated file?)")));
}

TEST_F(SafetensorsTest, CorruptJson) {
  EXPECT_THAT(OpenRawError(R"({"0.weight": {"dtype": "F32", )", 0),
              HasSubstr("header is not valid JSON"));
  EXPECT_THAT(OpenRawError("\x01\x02garbage", 0), HasSubstr("header is not valid JSON"));
  EXPECT_THAT(OpenRawError(R"([1, 2])", 0), HasSubstr("header is a JSON array, not an object"));
  EXPECT_THAT(OpenRawError(R"({"a": 5})", 0),
              HasSubstr("tensor 'a': entry is a JSON number, not an object"));
}

TEST_F(SafetensorsTest, RepeatedTensorName) {
  EXPECT_THAT(OpenRawError(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                       "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                           8),
              HasSubstr("names 'a' more than once"));
}

TEST_F(SafetensorsTest, UnsupportedDtypeIsNamed) {
  EXPECT_THAT(
      OpenRawError(R"({"w": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}})", 4),
      AllOf(HasSubstr("tensor 'w'"), HasSubstr("dtype 'F8_E4M3' is not supported"),
            HasSubstr("F16, BF16, F32")));
  EXPECT_THAT(OpenRawError(R"({"w": {"shape": [4], "data_offsets": [0, 4]}})", 4),
              HasSubstr("no string field 'dtype'"));
}

TEST_F(SafetensorsTest, BadShapes) {
  EXPECT_THAT(OpenRawError(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("not a non-negative integer")));
  EXPECT_THAT(OpenRawError(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4),
              HasSubstr("not a non-negative integer"));
  EXPECT_THAT(OpenRawError(R"({"w": {"dtype": "F32", "shape": 4, "data_offsets": [0, 4]}})", 4),
              HasSubstr("no array field 'shape'"));
  // 2^62 x 4 elements overflow int64 even before the element size.
  EXPECT_THAT(
      OpenRawError(
          R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 4]}})",
          4),
      AllOf(HasSubstr("tensor 'w'"), HasSubstr("64 bits")));
  // 2^62 F32 elements: the count fits, the byte size does not.
  EXPECT_THAT(
      OpenRawError(
          R"({"w": {"dtype": "F32", "shape": [1152921504606846976, 4], "data_offsets": [0, 4]}})",
          4),
      AllOf(HasSubstr("tensor 'w'"), HasSubstr("overflow")));
}

TEST_F(SafetensorsTest, OffsetsOutOfBounds) {
  EXPECT_THAT(OpenRawError(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("data_offsets [0, 16] end beyond the data "
                                                       "section (8 bytes")));
  EXPECT_THAT(OpenRawError(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8),
              HasSubstr("data_offsets [8, 4] end before begin"));
  EXPECT_THAT(OpenRawError(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 8),
              HasSubstr("needs 'data_offsets': [begin, end]"));
  EXPECT_THAT(OpenRawError(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 8),
              HasSubstr("needs 'data_offsets'"));
}

TEST_F(SafetensorsTest, SizeMismatch) {
  EXPECT_THAT(OpenRawError(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}})", 16),
              AllOf(HasSubstr("tensor 'w'"),
                    HasSubstr("data_offsets [0, 12] hold 12 bytes but shape [4] of F32 needs 16")));
  EXPECT_THAT(
      OpenRawError(R"({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 16]}})", 16),
      HasSubstr("hold 16 bytes but shape [2,2] of BF16 needs 8"));
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  EXPECT_THAT(OpenRawError(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                               "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]}})",
                           20),
              HasSubstr("tensors 'a' [0, 16) and 'b' [12, 20) overlap"));
  // The same range twice is an overlap too.
  EXPECT_THAT(OpenRawError(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                               "b": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})",
                           4),
              HasSubstr("overlap"));
  // Empty tensors own no bytes: one "inside" another is fine.
  absl::StatusOr<SafetensorsFile> fine = SafetensorsFile::Open(
      WriteRaw(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                   "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}})",
               8));
  EXPECT_TRUE(fine.ok()) << fine.status();
}

TEST_F(SafetensorsTest, Metadata) {
  absl::StatusOr<SafetensorsFile> file =
      SafetensorsFile::Open(WriteRaw(R"({"__metadata__": {"format": "pt", "note": "x"}})", 0));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->tensors().empty());
  EXPECT_EQ(file->metadata().size(), 2u);
  EXPECT_THAT(OpenRawError(R"({"__metadata__": {"epochs": 3}})", 0),
              HasSubstr("'__metadata__' entry 'epochs' is a JSON number, not a string"));
  EXPECT_THAT(OpenRawError(R"({"__metadata__": "pt"})", 0),
              HasSubstr("'__metadata__' is a JSON string"));
}

TEST_F(SafetensorsTest, ReadsFilesWithUnalignedDataSections) {
  // A header of 5 bytes puts the data section at offset 13: the views are unaligned and
  // ToFloat32 must still read them.
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string file;
  const uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) file.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  file += header;
  const float values[2] = {1.25f, -7.f};
  file.append(reinterpret_cast<const char*>(values), 8);
  ASSERT_NE((8 + header.size()) % 4, 0u);
  absl::StatusOr<SafetensorsFile> opened = SafetensorsFile::Open(WriteBytes(file));
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(ToFloat32(*opened->Find("w")).value(), std::vector<float>({1.25f, -7.f}));
}

}  // namespace
}  // namespace sluice::engine::models
