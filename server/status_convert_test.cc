#include "server/status_convert.h"

#include "gtest/gtest.h"
#include "server/http/openai_embeddings.h"

namespace sluice::server {
namespace {

// One mapping for every route (issue 29): the KServe routes, the transport's own refusals and
// OpenAI's route give a status the same HTTP status.
TEST(StatusConvertTest, OneHttpStatusPerCodeForEveryApi) {
  const struct {
    absl::Status status;
    int http;
  } cases[] = {
      {absl::OkStatus(), 200},
      {absl::InvalidArgumentError("x"), 400},
      {absl::NotFoundError("x"), 404},
      {absl::ResourceExhaustedError("queue full"), 429},
      {PayloadTooLargeError("body over the limit"), 413},
      {absl::CancelledError("x"), 499},
      {absl::UnavailableError("x"), 503},
      {absl::DeadlineExceededError("x"), 504},
      {absl::InternalError("x"), 500},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(ToHttpStatusCode(c.status), c.http) << c.status;
    if (!c.status.ok()) {
      EXPECT_EQ(http::openai::FromStatus(c.status, "m").http_status, c.http) << c.status;
    }
  }
}

TEST(StatusConvertTest, PayloadTooLargeIsResourceExhaustedForGrpc) {
  const absl::Status status = PayloadTooLargeError("over --max-request-bytes");
  EXPECT_TRUE(IsPayloadTooLarge(status));
  EXPECT_FALSE(IsPayloadTooLarge(absl::ResourceExhaustedError("queue full")));
  EXPECT_EQ(ToGrpcStatus(status).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcStatus(status).error_message(), "over --max-request-bytes");
}

}  // namespace
}  // namespace sluice::server
