#include "server/http/openai_embeddings.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace sluice::server::http::openai {
namespace {

using nlohmann::json;

EmbeddingsRequest MustParse(const std::string& body, const EmbeddingsLimits& limits = {}) {
  ParsedRequest parsed = ParseEmbeddingsRequest(body, limits);
  EXPECT_TRUE(parsed.request.has_value()) << body << ": " << parsed.error.message;
  return parsed.request.value_or(EmbeddingsRequest{});
}

ApiError MustFail(const std::string& body, const EmbeddingsLimits& limits = {}) {
  ParsedRequest parsed = ParseEmbeddingsRequest(body, limits);
  EXPECT_FALSE(parsed.request.has_value()) << body;
  return parsed.error;
}

template <typename T>
std::vector<T> Values(const engine::TensorView& view) {
  std::vector<T> out(view.data.size() / sizeof(T));
  std::memcpy(out.data(), view.data.data(), view.data.size());
  return out;
}

// What an encoder with `dim` outputs answers for `n` inputs: row i is i+1, i+2, ...
engine::InferenceResponse EncoderAnswer(int64_t n, int64_t dim,
                                        std::vector<int64_t> num_tokens = {}) {
  engine::InferenceResponse response;
  response.model_name = "enc";
  engine::Tensor embedding{"embedding", engine::DataType::kFp32, {n, dim}, {}};
  std::vector<float> values;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < dim; ++k) values.push_back(static_cast<float>(i + 1 + k));
  }
  embedding.data.resize(values.size() * sizeof(float));
  std::memcpy(embedding.data.data(), values.data(), embedding.data.size());
  response.outputs.push_back(std::move(embedding));
  if (!num_tokens.empty()) {
    engine::Tensor counts{"num_tokens", engine::DataType::kInt64, {n}, {}};
    counts.data.resize(num_tokens.size() * sizeof(int64_t));
    std::memcpy(counts.data.data(), num_tokens.data(), counts.data.size());
    response.outputs.push_back(std::move(counts));
  }
  return response;
}

TEST(OpenAiEmbeddingsTest, EveryInputFormParses) {
  EmbeddingsRequest one = MustParse(R"({"model":"enc","input":"hello"})");
  EXPECT_EQ(one.model, "enc");
  EXPECT_EQ(one.texts, std::vector<std::string>{"hello"});
  EXPECT_FALSE(one.base64);
  EmbeddingsRequest many =
      MustParse(R"({"model":"enc","input":["a","b c"],"encoding_format":"base64","user":"u"})");
  EXPECT_EQ(many.texts, (std::vector<std::string>{"a", "b c"}));
  EXPECT_TRUE(many.base64);
  EmbeddingsRequest ids = MustParse(R"({"model":"enc","input":[101,2023,102]})");
  ASSERT_EQ(ids.token_ids.size(), 1u);
  EXPECT_EQ(ids.token_ids[0], (std::vector<int64_t>{101, 2023, 102}));
  EmbeddingsRequest batch = MustParse(R"({"model":"enc","input":[[1,2,3],[4]],"dimensions":256})");
  ASSERT_EQ(batch.token_ids.size(), 2u);
  EXPECT_EQ(batch.token_ids[1], std::vector<int64_t>{4});
  EXPECT_EQ(batch.dimensions, 256);
}

TEST(OpenAiEmbeddingsTest, BadRequestsNameTheParameter) {
  struct Case {
    std::string body;
    std::string param;
  };
  EmbeddingsLimits limits;
  limits.max_inputs = 2;
  limits.max_tokens_per_input = 3;
  limits.max_string_bytes = 5;
  for (const Case& c : std::vector<Case>{
           {R"({"input":"x"})", "model"},
           {R"({"model":"","input":"x"})", "model"},
           {R"({"model":"enc"})", "input"},
           {R"({"model":"enc","input":""})", "input"},
           {R"({"model":"enc","input":[]})", "input"},
           {R"({"model":"enc","input":{"a":1}})", "input"},
           {R"({"model":"enc","input":["a",[1]]})", "input"},
           {R"({"model":"enc","input":[[1],"a"]})", "input"},
           {R"({"model":"enc","input":[1,-2]})", "input"},
           {R"({"model":"enc","input":[1.5]})", "input"},
           {R"({"model":"enc","input":["a","b","c"]})", "input"},  // 3 inputs > 2
           {R"({"model":"enc","input":[1,2,3,4]})", "input"},      // 4 tokens > 3
           {R"({"model":"enc","input":"toolong"})", "input"},      // 7 bytes > 5
           {R"({"model":"enc","input":"x","encoding_format":"int8"})", "encoding_format"},
           {R"({"model":"enc","input":"x","dimensions":0})", "dimensions"},
           {R"({"model":"enc","input":"x","dimensions":"8"})", "dimensions"},
       }) {
    ApiError error = MustFail(c.body, limits);
    EXPECT_EQ(error.http_status, 400) << c.body;
    EXPECT_EQ(error.param, c.param) << c.body << ": " << error.message;
    EXPECT_EQ(error.type, "invalid_request_error");
  }
  ApiError not_json = MustFail("{nope");
  EXPECT_EQ(not_json.http_status, 400);
  EXPECT_EQ(not_json.param, "");
}

TEST(OpenAiEmbeddingsTest, ErrorsHaveOpenAisShape) {
  ApiError error;
  error.message = "bad \"x\"";
  error.param = "input";
  json body = json::parse(ErrorBody(error));
  EXPECT_EQ(body["error"]["message"], "bad \"x\"");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "input");
  EXPECT_TRUE(body["error"]["code"].is_null());
  ApiError missing = FromStatus(absl::NotFoundError("unknown model 'nope'"), "nope");
  EXPECT_EQ(missing.http_status, 404);
  EXPECT_EQ(missing.code, "model_not_found");
  EXPECT_EQ(FromStatus(absl::ResourceExhaustedError("queue full"), "m").http_status, 429);
  EXPECT_EQ(FromStatus(absl::UnavailableError("draining"), "m").http_status, 503);
  EXPECT_EQ(FromStatus(absl::InternalError("fault"), "m").type, "server_error");
}

TEST(OpenAiEmbeddingsTest, StringsBecomeABytesTensorOfOneColumn) {
  auto request =
      ToInferenceRequest(MustParse(R"({"model":"enc","input":["hi","there"]})"),
                         TokenCounts::kNumTokens, [](absl::StatusOr<engine::InferenceResponse>) {});
  EXPECT_EQ(request->model_name(), "enc");
  ASSERT_EQ(request->inputs.size(), 1u);
  const engine::TensorView& text = request->inputs[0];
  EXPECT_EQ(text.name, "text");
  EXPECT_EQ(text.dtype, engine::DataType::kBytes);
  EXPECT_EQ(text.shape, (engine::Shape{2, 1}));
  const std::string raw(reinterpret_cast<const char*>(text.data.data()), text.data.size());
  EXPECT_EQ(raw, std::string("\x02\0\0\0hi\x05\0\0\0there", 15));
  EXPECT_EQ(request->requested_outputs, (std::vector<std::string>{"embedding", "num_tokens"}));
}

TEST(OpenAiEmbeddingsTest, TokenArraysArePaddedWithAMask) {
  auto request =
      ToInferenceRequest(MustParse(R"({"model":"enc","input":[[5,6,7],[8]]})"),
                         TokenCounts::kNumTokens, [](absl::StatusOr<engine::InferenceResponse>) {});
  ASSERT_EQ(request->inputs.size(), 2u);
  EXPECT_EQ(request->inputs[0].name, "input_ids");
  EXPECT_EQ(request->inputs[0].dtype, engine::DataType::kInt64);
  EXPECT_EQ(request->inputs[0].shape, (engine::Shape{2, 3}));
  EXPECT_EQ(Values<int64_t>(request->inputs[0]), (std::vector<int64_t>{5, 6, 7, 8, 0, 0}));
  EXPECT_EQ(request->inputs[1].name, "attention_mask");
  EXPECT_EQ(request->inputs[1].shape, (engine::Shape{2, 3}));
  EXPECT_EQ(Values<int64_t>(request->inputs[1]), (std::vector<int64_t>{1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(request->requested_outputs, std::vector<std::string>{"embedding"});
}

TEST(OpenAiEmbeddingsTest, TextUsageComesFromTheInputIdsOutput) {
  auto request =
      ToInferenceRequest(MustParse(R"({"model":"enc","input":["a b","c"]})"),
                         TokenCounts::kInputIds, [](absl::StatusOr<engine::InferenceResponse>) {});
  EXPECT_EQ(request->requested_outputs, (std::vector<std::string>{"embedding", "input_ids"}));
  // Token ids given: no count output is asked for.
  auto ids_request =
      ToInferenceRequest(MustParse(R"({"model":"enc","input":[[1,2]]})"), TokenCounts::kInputIds,
                         [](absl::StatusOr<engine::InferenceResponse>) {});
  EXPECT_EQ(ids_request->requested_outputs, std::vector<std::string>{"embedding"});

  // [CLS] a b [SEP] and [CLS] c [SEP] 0: 4 + 3 tokens; an id 0 inside a row still counts
  // (RoBERTa's <s> is 0).
  engine::InferenceResponse answer = EncoderAnswer(2, 3);
  engine::Tensor ids{"input_ids", engine::DataType::kInt64, {2, 4}, {}};
  const std::vector<int64_t> values = {0, 7, 8, 2, 101, 9, 102, 0};
  ids.data.resize(values.size() * sizeof(int64_t));
  std::memcpy(ids.data.data(), values.data(), ids.data.size());
  answer.outputs.push_back(std::move(ids));
  absl::StatusOr<std::string> body =
      ToResponseJson(MustParse(R"({"model":"enc","input":["a b","c"]})"), answer);
  ASSERT_TRUE(body.ok()) << body.status();
  const json parsed = json::parse(*body);
  EXPECT_EQ(parsed["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(parsed["usage"]["total_tokens"], 7);
}

TEST(OpenAiEmbeddingsTest, FloatResponseHasOpenAisShapeAndUsage) {
  const EmbeddingsRequest request = MustParse(R"({"model":"enc","input":["a","bb"]})");
  absl::StatusOr<std::string> text = ToResponseJson(request, EncoderAnswer(2, 3, {4, 7}));
  ASSERT_TRUE(text.ok()) << text.status();
  json body = json::parse(*text);
  EXPECT_EQ(body["object"], "list");
  EXPECT_EQ(body["model"], "enc");
  ASSERT_EQ(body["data"].size(), 2u);
  EXPECT_EQ(body["data"][1]["object"], "embedding");
  EXPECT_EQ(body["data"][1]["index"], 1);
  EXPECT_EQ(body["data"][1]["embedding"], (std::vector<float>{2, 3, 4}));
  EXPECT_EQ(body["usage"]["prompt_tokens"], 11);
  EXPECT_EQ(body["usage"]["total_tokens"], 11);
  // Token-id inputs: usage counts the ids given.
  const EmbeddingsRequest ids = MustParse(R"({"model":"enc","input":[[1,2],[3,4,5]]})");
  json from_ids = json::parse(ToResponseJson(ids, EncoderAnswer(2, 3)).value());
  EXPECT_EQ(from_ids["usage"]["prompt_tokens"], 5);
}

TEST(OpenAiEmbeddingsTest, Base64IsLittleEndianFloat32) {
  const EmbeddingsRequest request =
      MustParse(R"({"model":"enc","input":"a","encoding_format":"base64"})");
  json body = json::parse(ToResponseJson(request, EncoderAnswer(1, 4)).value());
  std::string bytes;
  ASSERT_TRUE(absl::Base64Unescape(body["data"][0]["embedding"].get<std::string>(), &bytes));
  ASSERT_EQ(bytes.size(), 16u);
  std::vector<float> values(4);
  std::memcpy(values.data(), bytes.data(), 16);
  EXPECT_EQ(values, (std::vector<float>{1, 2, 3, 4}));
}

TEST(OpenAiEmbeddingsTest, DimensionsShortenAndRenormalizeOrAreRefused) {
  const EmbeddingsRequest request = MustParse(R"({"model":"enc","input":"a","dimensions":2})");
  json body = json::parse(ToResponseJson(request, EncoderAnswer(1, 4)).value());
  // The first two values (1, 2), L2-normalized: 1/sqrt(5), 2/sqrt(5).
  ASSERT_EQ(body["data"][0]["embedding"].size(), 2u);
  EXPECT_NEAR(body["data"][0]["embedding"][0].get<double>(), 1 / std::sqrt(5.0), 1e-6);
  EXPECT_NEAR(body["data"][0]["embedding"][1].get<double>(), 2 / std::sqrt(5.0), 1e-6);
  const EmbeddingsRequest too_many = MustParse(R"({"model":"enc","input":"a","dimensions":5})");
  absl::StatusOr<std::string> refused = ToResponseJson(too_many, EncoderAnswer(1, 4));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("makes embeddings of 4"), std::string::npos);
}

TEST(OpenAiEmbeddingsTest, AModelOutsideTheContractIsAnInternalError) {
  const EmbeddingsRequest request = MustParse(R"({"model":"enc","input":["a","b"]})");
  EXPECT_EQ(ToResponseJson(request, EncoderAnswer(1, 4)).status().code(),  // 1 row for 2 inputs
            absl::StatusCode::kInternal);
  engine::InferenceResponse no_output;
  EXPECT_EQ(ToResponseJson(request, no_output).status().code(), absl::StatusCode::kInternal);
}

TEST(OpenAiEmbeddingsTest, ModelsList) {
  json body = json::parse(ModelsListJson({"enc", "other"}));
  EXPECT_EQ(body["object"], "list");
  ASSERT_EQ(body["data"].size(), 2u);
  EXPECT_EQ(body["data"][0]["id"], "enc");
  EXPECT_EQ(body["data"][0]["object"], "model");
  EXPECT_EQ(body["data"][1]["owned_by"], "sluice");
}

}  // namespace
}  // namespace sluice::server::http::openai
