#include "server/http/json_conversion.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/wire/float16.h"
#include "gtest/gtest.h"

namespace sluice::server::http {
namespace {

using engine::DataType;

absl::StatusOr<std::unique_ptr<engine::InferenceRequest>> Parse(
    std::string body, std::optional<std::string> header_length = std::nullopt,
    OutputEncoding* encoding = nullptr) {
  OutputEncoding ignored;
  return ToEngineRequest(
      "m", "", std::make_shared<const std::string>(std::move(body)), header_length,
      [](absl::StatusOr<engine::InferenceResponse>) {}, encoding != nullptr ? encoding : &ignored);
}

template <typename T>
T At(const engine::TensorView& view, size_t i) {
  T value;
  std::memcpy(&value, view.data.data() + i * sizeof(T), sizeof(T));
  return value;
}

TEST(JsonConversionTest, FlatAndNestedDataGiveTheSameBytes) {
  auto flat = Parse(R"({"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32",
                        "data":[1,2.5,-3,4e2]}]})");
  auto nested = Parse(R"({"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32",
                          "data":[[1,2.5],[-3,400]]}]})");
  ASSERT_TRUE(flat.ok()) << flat.status();
  ASSERT_TRUE(nested.ok()) << nested.status();
  const auto& a = (*flat)->inputs[0];
  const auto& b = (*nested)->inputs[0];
  ASSERT_EQ(a.data.size(), 16u);
  EXPECT_EQ(std::memcmp(a.data.data(), b.data.data(), 16), 0);
  EXPECT_EQ(At<float>(a, 1), 2.5f);
  EXPECT_EQ(At<float>(a, 3), 400.0f);
}

TEST(JsonConversionTest, EveryDatatype) {
  auto request = Parse(R"({"inputs":[
      {"name":"b","shape":[2],"datatype":"BOOL","data":[true,false]},
      {"name":"i8","shape":[1],"datatype":"INT8","data":[-128]},
      {"name":"u16","shape":[1],"datatype":"UINT16","data":[65535]},
      {"name":"i64","shape":[1],"datatype":"INT64","data":[-9007199254740993]},
      {"name":"u64","shape":[1],"datatype":"UINT64","data":[18446744073709551615]},
      {"name":"h","shape":[1],"datatype":"FP16","data":[1.5]},
      {"name":"bf","shape":[1],"datatype":"BF16","data":[2]},
      {"name":"d","shape":[1],"datatype":"FP64","data":[0.1]},
      {"name":"s","shape":[2],"datatype":"BYTES","data":["ab",""]}]})");
  ASSERT_TRUE(request.ok()) << request.status();
  const auto& in = (*request)->inputs;
  EXPECT_EQ(At<uint8_t>(in[0], 0), 1);
  EXPECT_EQ(At<int8_t>(in[1], 0), -128);
  EXPECT_EQ(At<uint16_t>(in[2], 0), 65535);
  EXPECT_EQ(At<int64_t>(in[3], 0), -9007199254740993);
  EXPECT_EQ(At<uint64_t>(in[4], 0), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(wire::HalfToFloat(At<uint16_t>(in[5], 0)), 1.5f);
  EXPECT_EQ(wire::BFloat16ToFloat(At<uint16_t>(in[6], 0)), 2.0f);
  EXPECT_EQ(At<double>(in[7], 0), 0.1);
  EXPECT_EQ(in[8].data.size(), 4u + 2 + 4);
}

TEST(JsonConversionTest, BinaryInputsAreBorrowedFromTheBody) {
  const std::string header =
      R"({"inputs":[{"name":"x","shape":[2],"datatype":"INT32","parameters":{"binary_data_size":8}}],)"
      R"("outputs":[{"name":"y","parameters":{"binary_data":true}}]})";
  std::string body = header;
  const int32_t values[2] = {7, -9};
  body.append(reinterpret_cast<const char*>(values), 8);
  OutputEncoding encoding;
  auto request = Parse(body, std::to_string(header.size()), &encoding);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(At<int32_t>((*request)->inputs[0], 1), -9);
  EXPECT_TRUE(encoding.binary.at("y"));
  EXPECT_EQ((*request)->requested_outputs, std::vector<std::string>{"y"});
}

TEST(JsonConversionTest, WireErrorsSayWhatIsWrong) {
  auto message = [](absl::StatusOr<std::unique_ptr<engine::InferenceRequest>> r) {
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_NE(message(Parse("{not json")).find("not valid JSON"), std::string::npos);
  EXPECT_NE(message(Parse(R"({"inputs":[{"name":"x","shape":[3],"datatype":"FP32","data":[1]}]})"))
                .find("needs 3 elements but data holds 1"),
            std::string::npos);
  EXPECT_NE(
      message(Parse(R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT8","data":[300]}]})"))
          .find("out of range"),
      std::string::npos);
  const std::string header =
      R"({"inputs":[{"name":"x","shape":[2],"datatype":"INT32","parameters":{"binary_data_size":8}}]})";
  EXPECT_NE(message(Parse(header + "1234", std::to_string(header.size()))).find("runs past"),
            std::string::npos);
  EXPECT_NE(message(Parse(header + "123456789", std::to_string(header.size()))).find("add up to"),
            std::string::npos);
  EXPECT_NE(message(Parse(header, "99999")).find("exceeds the body"), std::string::npos);
  EXPECT_NE(message(Parse(R"({"inputs":[],"parameters":{"priority":-1}})")).find("must be >= 0"),
            std::string::npos);
}

TEST(JsonConversionTest, TextTruncationParameters) {
  auto request =
      Parse(R"({"inputs":[],"parameters":{"truncate":true,"truncation_direction":"Left",)"
            R"("max_text_pair_tokens":8}})");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ((*request)->text_truncation.truncate, true);
  EXPECT_TRUE((*request)->text_truncation.from_left);
  EXPECT_EQ((*request)->text_truncation.max_text_pair_tokens, 8);
  (*request)->Complete(absl::CancelledError("test"));
  auto message = [](absl::StatusOr<std::unique_ptr<engine::InferenceRequest>> r) {
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_NE(message(Parse(R"({"inputs":[],"parameters":{"truncate":1}})"))
                .find("'truncate' must be a boolean"),
            std::string::npos);
  EXPECT_NE(message(Parse(R"({"inputs":[],"parameters":{"truncation_direction":"Up"}})"))
                .find("must be \"Right\" or \"Left\""),
            std::string::npos);
  EXPECT_NE(message(Parse(R"({"inputs":[],"parameters":{"max_text_pair_tokens":-1}})"))
                .find("must be >= 0"),
            std::string::npos);
}

TEST(JsonConversionTest, ResponseJsonAndBinary) {
  engine::InferenceResponse response;
  response.model_name = "m";
  response.model_version = 1;
  response.id = "q\"1";
  engine::Tensor a{"a", DataType::kFp32, {2}, {}};
  const float values[2] = {0.5f, -1.0f};
  a.data.resize(8);
  std::memcpy(a.data.data(), values, 8);
  engine::Tensor b = a;
  b.name = "b";
  response.outputs = {a, b};
  OutputEncoding encoding;
  encoding.binary["b"] = true;
  EncodedResponse encoded = FromEngineResponse(std::move(response), encoding);
  ASSERT_TRUE(encoded.header_length.has_value());
  const std::string json = encoded.body.substr(0, *encoded.header_length);
  EXPECT_EQ(json,
            R"({"model_name":"m","model_version":"1","id":"q\"1","outputs":[)"
            R"({"name":"a","datatype":"FP32","shape":[2],"data":[0.5,-1]},)"
            R"({"name":"b","datatype":"FP32","shape":[2],"parameters":{"binary_data_size":8}}]})");
  EXPECT_EQ(encoded.body.size(), json.size() + 8);
}

// Item 3 of the review: simdjson's DOM parser keeps buffers sized for the largest document it has
// parsed (10-14x it) for as long as the thread lives. After a large document the thread's
// parser is freed; small ones keep reusing theirs.
TEST(JsonConversionTest, ParserBuffersAreGivenBackAfterALargeDocument) {
  ASSERT_TRUE(Parse(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]})").ok());
  const size_t small = ThreadParserCapacityForTest();
  EXPECT_GT(small, 0u);
  EXPECT_LE(small, size_t{1} << 20);
  std::string big = R"({"inputs":[{"name":"x","shape":[1000000],"datatype":"FP32","data":[)";
  for (int i = 0; i < 1000000; ++i) absl::StrAppend(&big, i == 0 ? "" : ",", "1.5");
  big += "]}]}";
  ASSERT_GT(big.size(), size_t{3} << 20);
  auto parsed = Parse(big);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)->inputs[0].data.size(), 4000000u);
  EXPECT_LE(ThreadParserCapacityForTest(), size_t{1} << 20)
      << "the parser kept the buffers of a " << big.size() << "-byte document";
  // And the next small document is parsed as before.
  ASSERT_TRUE(Parse(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[2]}]})").ok());
}

TEST(JsonConversionTest, JsonPartOverTheLimitIsRefusedUnparsed) {
  const std::string body =
      R"({"inputs":[{"name":"x","shape":[2],"datatype":"FP32","data":[1,2]}]})";
  OutputEncoding encoding;
  auto refused = ToEngineRequest(
      "m", "", std::make_shared<const std::string>(body), std::nullopt,
      [](absl::StatusOr<engine::InferenceResponse>) {}, &encoding, /*max_json_bytes=*/16);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--http-max-json-bytes"), std::string::npos)
      << refused.status();
  // The binary part does not count: only the JSON header is limited.
  EXPECT_EQ(JsonPartSize(1000, std::string("100")).value_or(0), 100u);
  EXPECT_EQ(JsonPartSize(1000, std::nullopt).value_or(0), 1000u);
  EXPECT_FALSE(JsonPartSize(10, std::string("11")).ok());
  EXPECT_FALSE(JsonPartSize(10, std::string("x")).ok());
}

}  // namespace
}  // namespace sluice::server::http
