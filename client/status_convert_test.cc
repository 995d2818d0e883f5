#include "client/status_convert.h"

#include "gmock/gmock.h"
#include "grpcpp/support/status.h"
#include "gtest/gtest.h"

namespace sluice::client {
namespace {

using ::testing::HasSubstr;

TEST(FromGrpcStatusTest, OkIsOk) {
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK, "ServerLive", "localhost:8001").ok());
}

TEST(FromGrpcStatusTest, KeepsCodeAndServerMessage) {
  absl::Status status = FromGrpcStatus(
      grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown model 'foo'"), "ModelInfer", "h:1");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "unknown model 'foo'");
}

TEST(FromGrpcStatusTest, EveryCanonicalCodeMapsToTheSameNumber) {
  for (int code = 1; code <= 16; ++code) {
    absl::Status status =
        FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(code), "m"), "Rpc", "h:1");
    EXPECT_EQ(static_cast<int>(status.code()), code);
    EXPECT_FALSE(status.ok());
  }
}

TEST(FromGrpcStatusTest, UnavailableSaysWhichAddress) {
  absl::Status status = FromGrpcStatus(
      grpc::Status(grpc::StatusCode::UNAVAILABLE, "failed to connect to all addresses"),
      "ServerLive", "localhost:8001");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), "ServerLive to localhost:8001: failed to connect to all addresses");
}

TEST(FromGrpcStatusTest, EmptyMessageNamesTheRpcAndCode) {
  absl::Status status =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, ""), "LogSettings", "h:1");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(status.message(), "LogSettings: UNIMPLEMENTED (no message from the server)");
}

}  // namespace
}  // namespace sluice::client
