#include "engine/core/inference_request.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

// Counts deliveries and remembers the last one.
struct Delivery {
  std::atomic<int> calls{0};
  absl::StatusCode last_code = absl::StatusCode::kUnknown;
  std::string last_id;
  std::string last_message;

  InferenceRequest::Completion Callback() {
    return [this](absl::StatusOr<InferenceResponse> result) {
      last_code = result.status().code();
      if (result.ok()) {
        last_id = result->id;
      } else {
        last_message = std::string(result.status().message());
      }
      calls.fetch_add(1);
    };
  }
};

TEST(InferenceRequestTest, KeepsNameAndVersion) {
  InferenceRequest request("simple", 3, nullptr);
  EXPECT_EQ(request.model_name(), "simple");
  EXPECT_EQ(request.model_version(), 3);
  EXPECT_FALSE(request.completed());
  request.Complete(absl::CancelledError("test"));  // no callback: must still be safe
  EXPECT_TRUE(request.completed());
}

TEST(InferenceRequestTest, CompleteDeliversOnce) {
  Delivery delivery;
  {
    InferenceRequest request("m", -1, delivery.Callback());
    InferenceResponse response;
    response.id = "first";
    EXPECT_TRUE(request.Complete(std::move(response)));
    EXPECT_TRUE(request.completed());
    EXPECT_EQ(delivery.calls.load(), 1);
    EXPECT_EQ(delivery.last_code, absl::StatusCode::kOk);
    EXPECT_EQ(delivery.last_id, "first");

    EXPECT_FALSE(request.Complete(absl::InternalError("second")));
    EXPECT_EQ(delivery.calls.load(), 1);
    EXPECT_EQ(delivery.last_code, absl::StatusCode::kOk);
  }
  // Destroying a completed request delivers nothing more.
  EXPECT_EQ(delivery.calls.load(), 1);
  EXPECT_EQ(delivery.last_code, absl::StatusCode::kOk);
}

TEST(InferenceRequestTest, ErrorIsDeliveredAsIs) {
  Delivery delivery;
  InferenceRequest request("m", 1, delivery.Callback());
  EXPECT_TRUE(request.Complete(absl::InvalidArgumentError("bad INPUT0")));
  EXPECT_EQ(delivery.calls.load(), 1);
  EXPECT_EQ(delivery.last_code, absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(delivery.last_message, "bad INPUT0");
}

TEST(InferenceRequestTest, ConcurrentCompleteDeliversExactlyOnce) {
  constexpr int kThreads = 8;
  for (int round = 0; round < 50; ++round) {
    std::atomic<int> calls{0};
    std::atomic<int> winners{0};
    auto request = std::make_unique<InferenceRequest>(
        "m", 1, [&calls](absl::StatusOr<InferenceResponse>) { calls.fetch_add(1); });
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        while (!go.load()) {
        }
        InferenceResponse response;
        response.id = std::to_string(t);
        if (request->Complete(std::move(response))) winners.fetch_add(1);
      });
    }
    go.store(true);
    for (std::thread& thread : threads) thread.join();
    request.reset();
    ASSERT_EQ(calls.load(), 1) << "round " << round;
    ASSERT_EQ(winners.load(), 1) << "round " << round;
  }
}

TEST(InferenceRequestTest, DestroyedWithoutAnswerDeliversInternal) {
  Delivery delivery;
  { InferenceRequest request("m", 1, delivery.Callback()); }
  EXPECT_EQ(delivery.calls.load(), 1);
  EXPECT_EQ(delivery.last_code, absl::StatusCode::kInternal);
}

TEST(InferenceRequestTest, KeepaliveReleasedAfterComplete) {
  auto buffer = std::make_shared<std::vector<std::byte>>(64);
  std::weak_ptr<std::vector<std::byte>> weak = buffer;
  InferenceRequest request("m", 1, [](absl::StatusOr<InferenceResponse>) {});
  request.keepalive = buffer;
  buffer.reset();
  EXPECT_FALSE(weak.expired());  // the request alone keeps the buffer alive
  EXPECT_TRUE(request.Complete(InferenceResponse{}));
  EXPECT_TRUE(weak.expired());
}

TEST(InferenceRequestTest, KeepaliveStillHeldWhileTheCallbackRuns) {
  // The callback may still read the request's buffers (e.g. to echo them); they go after it.
  auto buffer = std::make_shared<int>(7);
  std::weak_ptr<int> weak = buffer;
  bool alive_in_callback = false;
  InferenceRequest request(
      "m", 1, [&](absl::StatusOr<InferenceResponse>) { alive_in_callback = !weak.expired(); });
  request.keepalive = std::move(buffer);
  EXPECT_TRUE(request.Complete(InferenceResponse{}));
  EXPECT_TRUE(alive_in_callback);
  EXPECT_TRUE(weak.expired());
}

TEST(InferenceRequestTest, KeepaliveReleasedWhenDestroyedUnanswered) {
  auto buffer = std::make_shared<int>(7);
  std::weak_ptr<int> weak = buffer;
  Delivery delivery;
  {
    InferenceRequest request("m", 1, delivery.Callback());
    request.keepalive = std::move(buffer);
  }
  EXPECT_TRUE(weak.expired());
  EXPECT_EQ(delivery.calls.load(), 1);
}

}  // namespace
}  // namespace sluice::engine
