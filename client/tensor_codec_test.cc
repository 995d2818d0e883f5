#include "client/tensor_codec.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "client/random_input.h"
#include "client/tensor_json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::client {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---- Data types -------------------------------------------------------------------------------

TEST(DataTypeSizeTest, KnowsEveryKServeType) {
  EXPECT_EQ(*DataTypeSize("BOOL"), 1);
  EXPECT_EQ(*DataTypeSize("UINT8"), 1);
  EXPECT_EQ(*DataTypeSize("INT8"), 1);
  EXPECT_EQ(*DataTypeSize("UINT16"), 2);
  EXPECT_EQ(*DataTypeSize("INT16"), 2);
  EXPECT_EQ(*DataTypeSize("FP16"), 2);
  EXPECT_EQ(*DataTypeSize("BF16"), 2);
  EXPECT_EQ(*DataTypeSize("UINT32"), 4);
  EXPECT_EQ(*DataTypeSize("INT32"), 4);
  EXPECT_EQ(*DataTypeSize("FP32"), 4);
  EXPECT_EQ(*DataTypeSize("UINT64"), 8);
  EXPECT_EQ(*DataTypeSize("INT64"), 8);
  EXPECT_EQ(*DataTypeSize("FP64"), 8);
  EXPECT_EQ(*DataTypeSize("BYTES"), 0);
}

TEST(DataTypeSizeTest, RejectsUnknownNames) {
  absl::StatusOr<int64_t> size = DataTypeSize("TYPE_FP32");
  EXPECT_EQ(size.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(size.status().message(), HasSubstr("TYPE_FP32"));
  EXPECT_FALSE(DataTypeSize("fp32").ok());
}

TEST(ElementCountTest, MultipliesDimensions) {
  EXPECT_EQ(*ElementCount({}), 1);
  EXPECT_EQ(*ElementCount({2, 3, 4}), 24);
  EXPECT_EQ(*ElementCount({5, 0}), 0);
}

TEST(ElementCountTest, RejectsNegativeAndOverflow) {
  EXPECT_EQ(ElementCount({-1, 16}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ElementCount({int64_t{1} << 32, int64_t{1} << 32}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DataTypeNameTest, MapsCTypes) {
  static_assert(DataTypeName<int32_t>() == "INT32");
  static_assert(DataTypeName<uint8_t>() == "UINT8");
  static_assert(DataTypeName<int64_t>() == "INT64");
  static_assert(DataTypeName<float>() == "FP32");
  static_assert(DataTypeName<double>() == "FP64");
}

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);  // Largest finite half.
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // Rounds up to Inf.
  EXPECT_EQ(FloatToHalf(0.1f), 0x2e66);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // Smallest subnormal.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -26)), 0x0000);  // Below half of it: zero.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // Smallest normal.
  EXPECT_EQ(FloatToHalf(INFINITY), 0x7c00);
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // Tie: to even.
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // Tie: to even (up).
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0xfc00), -INFINITY);
}

TEST(HalfTest, EveryHalfRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float value = HalfToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(value)))) << bits;
      continue;
    }
    ASSERT_EQ(FloatToHalf(value), bits) << "bits " << bits << " value " << value;
  }
}

TEST(BFloat16Test, KnownValuesAndRoundTrip) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(-2.0f), 0xc000);
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(NAN))));
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float value = BFloat16ToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(value)) continue;
    ASSERT_EQ(FloatToBFloat16(value), bits) << bits;
  }
}

// ---- Raw bytes --------------------------------------------------------------------------------

TEST(RawBytesTest, LittleEndianRoundTrip) {
  const std::vector<int32_t> values = {1, -2, 0x01020304};
  const std::string raw = ToRawBytes<int32_t>(values);
  ASSERT_EQ(raw.size(), 12u);
  EXPECT_EQ(raw.substr(8), std::string("\x04\x03\x02\x01", 4));
  EXPECT_THAT(*FromRawBytes<int32_t>(raw), ElementsAre(1, -2, 0x01020304));
  EXPECT_FALSE(FromRawBytes<int32_t>("abc").ok());
}

TEST(BytesElementsTest, SerializeAndParse) {
  const std::vector<std::string> elements = {"ab", "", std::string("\0x", 2)};
  const std::string raw = SerializeBytesElements(elements);
  EXPECT_EQ(raw, std::string("\x02\0\0\0ab\0\0\0\0\x02\0\0\0\0x", 4 + 2 + 4 + 4 + 2));
  EXPECT_THAT(*ParseBytesElements(raw), ElementsAre("ab", "", std::string("\0x", 2)));
  EXPECT_TRUE(ParseBytesElements("")->empty());
}

TEST(BytesElementsTest, RejectsTruncatedData) {
  EXPECT_EQ(ParseBytesElements(std::string("\x02\0\0", 3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseBytesElements(std::string("\x05\0\0\0ab", 6)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Building requests ------------------------------------------------------------------------

TEST(AddRawInputTest, AppendsInputAndContents) {
  inference::ModelInferRequest request;
  ASSERT_TRUE(AddInput(request, "INPUT0", {1, 3}, std::vector<int32_t>{1, 2, 3}).ok());
  ASSERT_TRUE(AddBytesInput(request, "TEXT", {2}, {"a", "bc"}).ok());
  ASSERT_EQ(request.inputs_size(), 2);
  EXPECT_EQ(request.inputs(0).name(), "INPUT0");
  EXPECT_EQ(request.inputs(0).datatype(), "INT32");
  EXPECT_THAT(request.inputs(0).shape(), ElementsAre(1, 3));
  EXPECT_FALSE(request.inputs(0).has_contents());
  ASSERT_EQ(request.raw_input_contents_size(), 2);
  EXPECT_THAT(*FromRawBytes<int32_t>(request.raw_input_contents(0)), ElementsAre(1, 2, 3));
  EXPECT_EQ(request.inputs(1).datatype(), "BYTES");
  EXPECT_THAT(*ParseBytesElements(request.raw_input_contents(1)), ElementsAre("a", "bc"));
}

TEST(AddRawInputTest, RejectsWrongByteSizeNamingTheTensor) {
  inference::ModelInferRequest request;
  absl::Status status = AddRawInput(request, "INPUT0", "FP32", {2, 2}, std::string(12, '\0'));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("input 'INPUT0'"));
  EXPECT_THAT(status.message(), HasSubstr("12 bytes"));
  EXPECT_THAT(status.message(), HasSubstr("expected 16"));
  EXPECT_EQ(request.inputs_size(), 0);  // Unchanged on error.
  EXPECT_EQ(request.raw_input_contents_size(), 0);
}

TEST(AddRawInputTest, RejectsBadShapeTypeAndBytesCount) {
  inference::ModelInferRequest request;
  EXPECT_EQ(AddRawInput(request, "X", "FP32", {-1, 4}, "").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AddRawInput(request, "X", "FLOAT", {1}, "abcd").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AddBytesInput(request, "X", {3}, {"a", "b"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AddRawInput(request, "", "FP32", {1}, "abcd").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(AddRawInputTest, RejectsDuplicateAndMixedRequests) {
  inference::ModelInferRequest request;
  ASSERT_TRUE(AddInput(request, "X", {1}, std::vector<float>{1.0f}).ok());
  EXPECT_EQ(AddInput(request, "X", {1}, std::vector<float>{1.0f}).code(),
            absl::StatusCode::kFailedPrecondition);

  inference::ModelInferRequest typed;
  auto* input = typed.add_inputs();
  input->set_name("T");
  input->mutable_contents()->add_fp32_contents(1.0f);
  EXPECT_EQ(AddInput(typed, "X", {1}, std::vector<float>{1.0f}).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(RandomInputTest, DeterministicSizedAndInRange) {
  const std::string a = *RandomInput("INT32", {4, 8}, 7);
  EXPECT_EQ(a.size(), 4u * 8u * 4u);
  EXPECT_EQ(a, *RandomInput("INT32", {4, 8}, 7));
  EXPECT_NE(a, *RandomInput("INT32", {4, 8}, 8));
  // (Each StatusOr is kept in a local: a range-for over `*Temporary()` would dangle.)
  const std::vector<int32_t> ints = *FromRawBytes<int32_t>(a);
  for (int32_t v : ints) {
    EXPECT_GE(v, -32);
    EXPECT_LT(v, 32);
  }
  const std::vector<float> floats = *FromRawBytes<float>(*RandomInput("FP32", {100}, 1));
  for (float v : floats) {
    EXPECT_GE(v, -1.0f);
    EXPECT_LT(v, 1.0f);
  }
  const std::string bools = *RandomInput("BOOL", {50}, 1);
  for (char c : bools) EXPECT_TRUE(c == 0 || c == 1);
  EXPECT_EQ(RandomInput("FP16", {3}, 1)->size(), 6u);
  EXPECT_EQ(RandomInput("UINT64", {3}, 1)->size(), 24u);
  EXPECT_EQ(ParseBytesElements(*RandomInput("BYTES", {2, 3}, 1))->size(), 6u);
}

TEST(RandomInputTest, RejectsVariableDimensionAndUnknownType) {
  EXPECT_EQ(RandomInput("FP32", {-1, 3}, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RandomInput("FLOAT", {3}, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

inference::ModelMetadataResponse SimpleMetadata() {
  inference::ModelMetadataResponse metadata;
  metadata.set_name("simple");
  for (const char* name : {"INPUT0", "INPUT1"}) {
    auto* input = metadata.add_inputs();
    input->set_name(name);
    input->set_datatype("INT32");
    input->add_shape(-1);
    input->add_shape(16);
  }
  auto* text = metadata.add_inputs();
  text->set_name("TEXT");
  text->set_datatype("BYTES");
  text->add_shape(2);
  return metadata;
}

TEST(MakeRandomRequestTest, BatchDimensionAndVariableDimensions) {
  inference::ModelMetadataResponse metadata = SimpleMetadata();
  auto* dynamic = metadata.add_inputs();
  dynamic->set_name("SEQ");
  dynamic->set_datatype("FP32");
  dynamic->add_shape(-1);
  dynamic->add_shape(-1);
  dynamic->add_shape(3);

  absl::StatusOr<inference::ModelInferRequest> request = MakeRandomRequest(metadata, 8, 1);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->model_name(), "simple");
  ASSERT_EQ(request->inputs_size(), 4);
  EXPECT_THAT(request->inputs(0).shape(), ElementsAre(8, 16));
  EXPECT_THAT(request->inputs(2).shape(), ElementsAre(2));
  EXPECT_THAT(request->inputs(3).shape(), ElementsAre(8, 1, 3));
  EXPECT_EQ(request->raw_input_contents(3).size(), 8u * 3u * 4u);
  // Inputs get different seeds.
  EXPECT_NE(request->raw_input_contents(0), request->raw_input_contents(1));
  EXPECT_FALSE(MakeRandomRequest(metadata, 0).ok());
}

TEST(MakeRandomRequestTest, SequenceModelInputs) {
  // The encoder's metadata: [batch, seq] token inputs with Triton's BERT names.
  inference::ModelMetadataResponse metadata;
  metadata.set_name("embedder");
  for (const char* name : {"input_ids", "attention_mask", "token_type_ids"}) {
    auto* input = metadata.add_inputs();
    input->set_name(name);
    input->set_datatype("INT64");
    input->add_shape(-1);
    input->add_shape(-1);
  }
  absl::StatusOr<inference::ModelInferRequest> request = MakeRandomRequest(metadata, 2, 1, 5);
  ASSERT_TRUE(request.ok()) << request.status();
  for (int i = 0; i < 3; ++i) EXPECT_THAT(request->inputs(i).shape(), ElementsAre(2, 5));
  const std::vector<int64_t> ids = *FromRawBytes<int64_t>(request->raw_input_contents(0));
  EXPECT_EQ(ids.size(), 10u);
  for (int64_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 64);
  }
  EXPECT_THAT(*FromRawBytes<int64_t>(request->raw_input_contents(1)), Each(1));
  EXPECT_THAT(*FromRawBytes<int64_t>(request->raw_input_contents(2)), Each(0));
  EXPECT_FALSE(MakeRandomRequest(metadata, 1, 1, 0).ok());
}

TEST(MakeRandomRequestTest, TokenIdsCoverTheGivenVocabulary) {
  inference::ModelMetadataResponse metadata;
  metadata.set_name("embedder");
  auto* input = metadata.add_inputs();
  input->set_name("input_ids");
  input->set_datatype("INT64");
  input->add_shape(-1);
  input->add_shape(-1);
  absl::StatusOr<inference::ModelInferRequest> request =
      MakeRandomRequest(metadata, 4, 7, 1000, /*token_id_limit=*/4096);
  ASSERT_TRUE(request.ok()) << request.status();
  const std::vector<int64_t> ids = *FromRawBytes<int64_t>(request->raw_input_contents(0));
  ASSERT_EQ(ids.size(), 4000u);
  int64_t largest = 0;
  for (int64_t id : ids) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 4096);
    largest = std::max(largest, id);
  }
  // 4000 uniform draws from 4096 ids: the largest is above 3900 but with negligible chance.
  EXPECT_GT(largest, 3900);
  // A limit of one: every id 0. A limit below one is refused.
  request = MakeRandomRequest(metadata, 1, 7, 16, 1);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_THAT(*FromRawBytes<int64_t>(request->raw_input_contents(0)), Each(0));
  EXPECT_FALSE(MakeRandomRequest(metadata, 1, 7, 16, 0).ok());
}

// ---- Sequence length ranges ---------------------------------------------------------------------

TEST(LengthRangeTest, ParsesOneLengthOrARange) {
  absl::StatusOr<LengthRange> one = ParseLengthRange("128", 512);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->min, 128);
  EXPECT_EQ(one->max, 128);
  EXPECT_TRUE(one->fixed());
  absl::StatusOr<LengthRange> range = ParseLengthRange("8:256", 512);
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(range->min, 8);
  EXPECT_EQ(range->max, 256);
  EXPECT_FALSE(range->fixed());
  EXPECT_TRUE(ParseLengthRange("4:4", 512)->fixed());
  for (const char* bad :
       {"", "0", "-3", "x", "8:", ":8", "9:8", "0:8", "8:513", "1:2:3", "8-256"}) {
    absl::StatusOr<LengthRange> parsed = ParseLengthRange(bad, 512);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("MIN:MAX")) << bad;
  }
}

TEST(LengthRangeTest, DrawsStayInBoundsAndCoverEveryLength) {
  const LengthRange range{8, 256};
  std::vector<int64_t> counts(257, 0);
  constexpr int kDraws = 249 * 400;
  for (uint64_t i = 0; i < kDraws; ++i) {
    const int64_t length = DrawLength(range, 3, i);
    ASSERT_GE(length, 8) << i;
    ASSERT_LE(length, 256) << i;
    ++counts[length];
  }
  // Uniform: each of the 249 lengths expects 400 draws (sd 20); every one within 6 sd.
  for (int64_t length = 8; length <= 256; ++length) {
    EXPECT_GT(counts[length], 280) << length;
    EXPECT_LT(counts[length], 520) << length;
  }
  // The mean is (8 + 256) / 2 within a few standard errors (sd of the mean ~0.23).
  double sum = 0;
  for (int64_t length = 8; length <= 256; ++length) sum += double(length) * counts[length];
  EXPECT_NEAR(sum / kDraws, 132.0, 1.5);
  // One length: always it.
  EXPECT_EQ(DrawLength(LengthRange{5, 5}, 3, 17), 5);
  // The extremes of the int64 range do not overflow.
  const LengthRange wide{1, INT64_MAX};
  for (uint64_t i = 0; i < 100; ++i) EXPECT_GE(DrawLength(wide, 1, i), 1);
}

TEST(LengthRangeTest, TheSameSeedGivesTheSameLengthsAndAnotherSeedOthers) {
  const LengthRange range{8, 256};
  std::vector<int64_t> a, b, c;
  for (uint64_t i = 0; i < 200; ++i) {
    a.push_back(DrawLength(range, 42, i));
    b.push_back(DrawLength(range, 42, i));
    c.push_back(DrawLength(range, 43, i));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Successive indexes are not one repeated value.
  EXPECT_NE(std::count(a.begin(), a.end(), a[0]), 200);
}

TEST(MakeRandomRequestTest, EncoderWithTokenizerGetsTokenIdsOnly) {
  // An encoder with a tokenizer also lists BYTES text / text_pair; a request carries one or the
  // other, so random inputs are the token ids alone.
  inference::ModelMetadataResponse metadata;
  metadata.set_name("embedder");
  for (const char* name : {"input_ids", "attention_mask", "text", "text_pair"}) {
    auto* input = metadata.add_inputs();
    input->set_name(name);
    const bool text = absl::string_view(name).substr(0, 4) == "text";
    input->set_datatype(text ? "BYTES" : "INT64");
    input->add_shape(-1);
    input->add_shape(text ? 1 : -1);
  }
  absl::StatusOr<inference::ModelInferRequest> request = MakeRandomRequest(metadata, 2, 1, 5);
  ASSERT_TRUE(request.ok()) << request.status();
  ASSERT_EQ(request->inputs_size(), 2);
  EXPECT_EQ(request->inputs(0).name(), "input_ids");
  EXPECT_EQ(request->inputs(1).name(), "attention_mask");
}

TEST(InputsFromJsonTest, FullySpecifiedInputsWithoutMetadata) {
  absl::StatusOr<inference::ModelInferRequest> request = InputsFromJson(R"({
      "id": "r1",
      "inputs": [
        {"name": "A", "datatype": "INT32", "shape": [2, 2], "data": [[1, 2], [3, -4]]},
        {"name": "B", "datatype": "FP32", "shape": [2], "data": [0.5, 1]},
        {"name": "C", "datatype": "BYTES", "shape": [1], "data": ["hi"]},
        {"name": "D", "datatype": "BOOL", "shape": [3], "data": [true, false, 1]},
        {"name": "E", "datatype": "FP16", "shape": [1], "data": [1.0]},
        {"name": "F", "datatype": "UINT64", "shape": [1], "data": [18446744073709551615]}
      ],
      "outputs": [{"name": "OUT"}]})",
                                                                        nullptr);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->id(), "r1");
  ASSERT_EQ(request->inputs_size(), 6);
  EXPECT_THAT(*FromRawBytes<int32_t>(request->raw_input_contents(0)), ElementsAre(1, 2, 3, -4));
  EXPECT_THAT(*FromRawBytes<float>(request->raw_input_contents(1)), ElementsAre(0.5f, 1.0f));
  EXPECT_THAT(*ParseBytesElements(request->raw_input_contents(2)), ElementsAre("hi"));
  EXPECT_EQ(request->raw_input_contents(3), std::string("\1\0\1", 3));
  EXPECT_THAT(*FromRawBytes<uint16_t>(request->raw_input_contents(4)), ElementsAre(0x3c00));
  EXPECT_THAT(*FromRawBytes<uint64_t>(request->raw_input_contents(5)), ElementsAre(UINT64_MAX));
  ASSERT_EQ(request->outputs_size(), 1);
  EXPECT_EQ(request->outputs(0).name(), "OUT");
}

TEST(InputsFromJsonTest, TakesDatatypeAndShapeFromMetadata) {
  const inference::ModelMetadataResponse metadata = SimpleMetadata();
  absl::StatusOr<inference::ModelInferRequest> request = InputsFromJson(
      R"({"inputs": [{"name": "INPUT0", "shape": [1, 16], "data": [0,1,2,3,4,5,6,7,8,9,10,11,
          12,13,14,15]}, {"name": "TEXT", "data": ["x", "y"]}]})",
      &metadata);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->model_name(), "simple");
  EXPECT_EQ(request->inputs(0).datatype(), "INT32");
  EXPECT_EQ(request->inputs(1).datatype(), "BYTES");
  EXPECT_THAT(request->inputs(1).shape(), ElementsAre(2));
}

// Runs InputsFromJson against SimpleMetadata and returns the error message (or "OK").
std::string JsonError(const std::string& text) {
  const inference::ModelMetadataResponse metadata = SimpleMetadata();
  absl::StatusOr<inference::ModelInferRequest> request = InputsFromJson(text, &metadata);
  if (request.ok()) return "OK";
  EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(request.status().message());
}

TEST(InputsFromJsonTest, ClearErrorsNamingTheTensor) {
  EXPECT_THAT(JsonError(R"({"inputs": [{"name": "INPUT0", "data": [1]}]})"),
              HasSubstr("input 'INPUT0': \"shape\" is required (the model's shape [-1,16]"));
  EXPECT_THAT(JsonError(R"({"inputs": [{"name": "INPUT0", "shape": [1, 2], "data": [1, 2]}]})"),
              HasSubstr("input 'INPUT0': shape [1,2] does not match the model's [-1,16]"));
  EXPECT_THAT(JsonError(R"({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1,16]}]})"),
              HasSubstr("input 'INPUT0': datatype FP32 but the model expects INT32"));
  EXPECT_THAT(JsonError(R"({"inputs": [{"name": "TEXT", "data": ["x"]}]})"),
              HasSubstr("input 'TEXT': 1 data elements for shape [2] (2)"));
  EXPECT_THAT(JsonError(R"({"inputs": [{"name": "TEXT", "data": ["x", 3]}]})"),
              HasSubstr("input 'TEXT': data[1] for BYTES: 3 is not a string"));
  EXPECT_THAT(JsonError(R"({"inputs": [{"name": "NOPE", "data": []}]})"),
              HasSubstr("model 'simple' has no input 'NOPE' (inputs: INPUT0, INPUT1, TEXT)"));
  EXPECT_THAT(JsonError(R"({"inputs": [{"name": "TEXT", "dtype": "BYTES", "data": []}]})"),
              HasSubstr("unknown field 'dtype' in inputs[0]"));
  EXPECT_THAT(JsonError(R"({"inputs": [{"name": "TEXT", "data": ["x", "y"]})"),
              HasSubstr("invalid JSON"));
  EXPECT_THAT(JsonError(R"([1, 2])"), HasSubstr("\"inputs\""));
  EXPECT_THAT(JsonError(R"({"inputs": [{"data": []}]})"), HasSubstr("inputs[0] needs a \"name\""));
}

TEST(InputsFromJsonTest, IntegerRangeAndKind) {
  auto error = [](const std::string& datatype, const std::string& value) {
    absl::StatusOr<inference::ModelInferRequest> request =
        InputsFromJson(R"({"inputs": [{"name": "X", "datatype": ")" + datatype +
                           R"(", "shape": [1], "data": [)" + value + "]}]}",
                       nullptr);
    return request.ok() ? std::string("OK") : std::string(request.status().message());
  };
  EXPECT_EQ(error("INT8", "127"), "OK");
  EXPECT_THAT(error("INT8", "128"), HasSubstr("input 'X': data[0] for INT8: 128 is out of range"));
  EXPECT_THAT(error("UINT8", "-1"), HasSubstr("out of range"));
  EXPECT_THAT(error("INT32", "1.5"), HasSubstr("1.5 is not an integer"));
  EXPECT_THAT(error("FP32", "\"a\""), HasSubstr("is not a number"));
  EXPECT_EQ(error("INT64", "-9223372036854775808"), "OK");
  EXPECT_THAT(error("INT64", "9223372036854775808"), HasSubstr("out of range"));
  EXPECT_THAT(error("BOOL", "2"), HasSubstr("out of range"));
}

// ---- Decoding responses -----------------------------------------------------------------------

inference::ModelInferResponse RawResponse() {
  inference::ModelInferResponse response;
  response.set_model_name("m");
  response.set_model_version("1");
  response.set_id("r7");
  auto* out0 = response.add_outputs();
  out0->set_name("OUT0");
  out0->set_datatype("FP32");
  out0->add_shape(1);
  out0->add_shape(3);
  response.add_raw_output_contents(ToRawBytes<float>(std::vector<float>{0.1f, -2.0f, NAN}));
  auto* out1 = response.add_outputs();
  out1->set_name("OUT1");
  out1->set_datatype("BYTES");
  out1->add_shape(2);
  response.add_raw_output_contents(SerializeBytesElements({"ok", "\xff"}));
  return response;
}

TEST(DecodeOutputTest, RawOutputs) {
  const inference::ModelInferResponse response = RawResponse();
  absl::StatusOr<OutputTensor> out0 = DecodeOutput(response, "OUT0");
  ASSERT_TRUE(out0.ok()) << out0.status();
  EXPECT_EQ(out0->datatype, "FP32");
  EXPECT_THAT(out0->shape, ElementsAre(1, 3));
  absl::StatusOr<std::vector<float>> values = out0->As<float>();
  ASSERT_TRUE(values.ok());
  EXPECT_EQ((*values)[1], -2.0f);
  EXPECT_EQ(out0->As<int32_t>().status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<OutputTensor> out1 = DecodeOutput(response, "OUT1");
  ASSERT_TRUE(out1.ok());
  EXPECT_THAT(*ParseBytesElements(out1->raw), ElementsAre("ok", "\xff"));
  EXPECT_EQ(DecodeOutputs(response)->size(), 2u);
}

TEST(DecodeOutputTest, MissingAndMalformedOutputs) {
  inference::ModelInferResponse response = RawResponse();
  absl::StatusOr<OutputTensor> missing = DecodeOutput(response, "NOPE");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("OUT0, OUT1"));

  response.mutable_outputs(0)->set_shape(1, 4);
  absl::StatusOr<OutputTensor> wrong_size = DecodeOutput(response, "OUT0");
  EXPECT_EQ(wrong_size.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong_size.status().message(), HasSubstr("output 'OUT0'"));

  response = RawResponse();
  response.mutable_raw_output_contents()->RemoveLast();
  EXPECT_THAT(DecodeOutput(response, "OUT0").status().message(),
              HasSubstr("1 raw_output_contents for 2 outputs"));
}

TEST(DecodeOutputTest, TypedContents) {
  inference::ModelInferResponse response;
  auto* ints = response.add_outputs();
  ints->set_name("I");
  ints->set_datatype("INT16");
  ints->add_shape(2);
  ints->mutable_contents()->add_int_contents(-3);
  ints->mutable_contents()->add_int_contents(300);
  auto* bools = response.add_outputs();
  bools->set_name("B");
  bools->set_datatype("BOOL");
  bools->add_shape(1);
  bools->mutable_contents()->add_bool_contents(true);
  auto* text = response.add_outputs();
  text->set_name("T");
  text->set_datatype("BYTES");
  text->add_shape(1);
  text->mutable_contents()->add_bytes_contents("abc");

  absl::StatusOr<OutputTensor> i = DecodeOutput(response, "I");
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_THAT(*FromRawBytes<int16_t>(i->raw), ElementsAre(-3, 300));
  EXPECT_EQ(DecodeOutput(response, "B")->raw, std::string("\1", 1));
  EXPECT_THAT(*ParseBytesElements(DecodeOutput(response, "T")->raw), ElementsAre("abc"));

  ints->mutable_contents()->set_int_contents(1, 70000);  // Does not fit INT16.
  EXPECT_EQ(DecodeOutput(response, "I").status().code(), absl::StatusCode::kInvalidArgument);

  auto* half = response.add_outputs();
  half->set_name("H");
  half->set_datatype("FP16");
  half->add_shape(1);
  EXPECT_THAT(DecodeOutput(response, "H").status().message(), HasSubstr("must come raw"));
}

TEST(ResponseToJsonTest, PrintsOutputs) {
  absl::StatusOr<std::string> text = ResponseToJson(RawResponse());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            R"({"model_name":"m","model_version":"1","id":"r7","outputs":[)"
            R"({"name":"OUT0","datatype":"FP32","shape":[1,3],"data":[0.1,-2.0,null]},)"
            R"({"name":"OUT1","datatype":"BYTES","shape":[2],"data":["ok",")"
            "\xef\xbf\xbd"  // U+FFFD for the invalid byte.
            R"("]}]})");
  EXPECT_THAT(*ResponseToJson(RawResponse(), 2), HasSubstr("\n  \"outputs\": ["));
}

}  // namespace
}  // namespace sluice::client
