#include "server/http/route_table.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::server::http {
namespace {

using ::testing::HasSubstr;

HttpResponse Shaped(absl::string_view api, const HttpError& error) {
  HttpResponse response;
  response.status = error.status;
  response.body = std::string(api) + "|" + error.code + "|" + error.message;
  return response;
}

class RouteTableTest : public ::testing::Test {
 protected:
  RouteTableTest() : table_([](const HttpError& e) { return Shaped("fallback", e); }) {
    table_.AddApi("/v2", [](const HttpError& e) { return Shaped("kserve", e); });
    table_.AddApi("/v1", [](const HttpError& e) { return Shaped("openai", e); });
    table_.Add("GET", "/v2/models/stats", Record("all-stats"));
    table_.Add("GET", "/v2/models/{model}[/versions/{version}]", Record("metadata"));
    table_.Add("POST", "/v2/models/{model}[/versions/{version}]/infer", Record("infer"));
    table_.Add("GET", "/v1/models[/{model}]", Record("models"));
  }

  RouteHandler Record(std::string name) {
    return [this, name](const RouteParams& params, HttpRequest&&, Responder respond) {
      called_ = name;
      model_ = name == "models"      ? params.Get("model")
               : name == "all-stats" ? ""
                                     : params.Get("model");
      version_ = name == "metadata" || name == "infer" ? params.Get("version") : "";
      respond(HttpResponse{});
    };
  }

  HttpResponse Call(std::string method, std::string path) {
    HttpRequest request;
    request.method = std::move(method);
    request.path = std::move(path);
    HttpResponse answer;
    table_.Dispatch(std::move(request), [&answer](HttpResponse r) { answer = std::move(r); });
    return answer;
  }

  RouteTable table_;
  std::string called_;
  std::string model_;
  std::string version_;
};

TEST_F(RouteTableTest, MatchesCapturesAndOptionalParts) {
  EXPECT_EQ(Call("GET", "/v2/models/minilm").status, 200);
  EXPECT_EQ(called_, "metadata");
  EXPECT_EQ(model_, "minilm");
  EXPECT_EQ(version_, "");
  EXPECT_EQ(Call("POST", "/v2/models/minilm/versions/3/infer").status, 200);
  EXPECT_EQ(called_, "infer");
  EXPECT_EQ(version_, "3");
  EXPECT_EQ(Call("GET", "/v1/models").status, 200);
  EXPECT_EQ(model_, "");
  EXPECT_EQ(Call("GET", "/v1/models/e5").status, 200);
  EXPECT_EQ(model_, "e5");
}

TEST_F(RouteTableTest, PercentDecodesCapturesAndRefusesMalformedEscapes) {
  EXPECT_EQ(Call("GET", "/v2/models/a%2Fb").status, 200);
  EXPECT_EQ(model_, "a/b");
  HttpResponse bad = Call("GET", "/v2/models/a%zz");
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("kserve|"));
  EXPECT_THAT(bad.body, HasSubstr("malformed percent-escape"));
}

TEST_F(RouteTableTest, EarlierLiteralRouteWinsOverCapture) {
  EXPECT_EQ(Call("GET", "/v2/models/stats").status, 200);
  EXPECT_EQ(called_, "all-stats");
}

TEST_F(RouteTableTest, WrongMethodIs405WithAllowInTheApisShape) {
  HttpResponse wrong = Call("GET", "/v2/models/m/infer");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.body,
            "kserve|method_not_allowed|GET is not allowed on /v2/models/m/infer; use POST");
  ASSERT_EQ(wrong.headers.size(), 1u);
  EXPECT_EQ(wrong.headers[0].first, "Allow");
  EXPECT_EQ(wrong.headers[0].second, "POST");
  EXPECT_EQ(called_, "");
}

TEST_F(RouteTableTest, UnknownPathIs404NamingWhatTheApiServes) {
  HttpResponse openai = Call("POST", "/v1/chat/completions");
  EXPECT_EQ(openai.status, 404);
  EXPECT_THAT(openai.body,
              HasSubstr("openai|unknown_url|no such endpoint: POST /v1/chat/completions"));
  EXPECT_THAT(openai.body, HasSubstr("GET /v1/models[/{model}]"));
  EXPECT_THAT(openai.body, ::testing::Not(HasSubstr("/v2/")));
  HttpResponse other = Call("GET", "/metrics");
  EXPECT_EQ(other.status, 404);
  EXPECT_EQ(other.body, "fallback|unknown_url|no such endpoint: GET /metrics");
}

TEST_F(RouteTableTest, ErrorBodyTakesTheShapeOfThePathsApi) {
  EXPECT_EQ(table_.ErrorBody("/v1/embeddings?x=1", 413, "too big"), "openai||too big");
  EXPECT_EQ(table_.ErrorBody("/v2/models/m/infer", 503, "busy"), "kserve||busy");
  EXPECT_EQ(table_.ErrorBody("", 400, "bad"), "fallback||bad");
}

}  // namespace
}  // namespace sluice::server::http
