#include "engine/preparation_pool.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

TEST(PreparationPoolTest, RefusesBadOptions) {
  EXPECT_EQ(PreparationPool::Create({.threads = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PreparationPool::Create({.threads = 1, .max_queue = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PreparationPoolTest, RunsJobsOnItsThreads) {
  auto pool = PreparationPool::Create({.threads = 2, .max_queue = 64});
  ASSERT_TRUE(pool.ok());
  std::atomic<int> ran{0};
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> on_caller{false};
  for (int i = 0; i < 50; ++i) {
    PreparationPool::Job job = [&] {
      if (std::this_thread::get_id() == caller) on_caller = true;
      ++ran;
    };
    ASSERT_TRUE((*pool)->TrySubmit(job).ok());
  }
  (*pool)->Stop();
  EXPECT_EQ(ran.load(), 50);
  EXPECT_FALSE(on_caller.load());
  EXPECT_TRUE((*pool)->Idle());
}

TEST(PreparationPoolTest, FullQueueIsResourceExhaustedAtOnceAndKeepsTheJob) {
  auto pool = PreparationPool::Create({.threads = 1, .max_queue = 2});
  ASSERT_TRUE(pool.ok());
  std::atomic<bool> release{false};
  std::atomic<bool> started{false};
  PreparationPool::Job blocker = [&] {
    started = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  ASSERT_TRUE((*pool)->TrySubmit(blocker).ok());
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::atomic<int> ran{0};
  for (int i = 0; i < 2; ++i) {
    PreparationPool::Job job = [&] { ++ran; };
    ASSERT_TRUE((*pool)->TrySubmit(job).ok());
  }
  bool kept_ran = false;
  PreparationPool::Job refused = [&] { kept_ran = true; };
  const absl::Status status = (*pool)->TrySubmit(refused);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("tokenization queue is full (2"), absl::string_view::npos)
      << status.message();
  ASSERT_TRUE(refused);  // not moved from: the caller answers its request
  EXPECT_FALSE((*pool)->Idle());
  release = true;
  (*pool)->Stop();  // runs the two queued jobs before it returns
  EXPECT_EQ(ran.load(), 2);
  EXPECT_FALSE(kept_ran);
  PreparationPool::Job late = [] {};
  EXPECT_EQ((*pool)->TrySubmit(late).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace sluice::engine
