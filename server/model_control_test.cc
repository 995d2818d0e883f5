// Issue 17 item 8: the control queue is bounded, skips callers that gave up, and Stop() holds its
// deadline while a task is stuck.

#include "server/model_control.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::server {
namespace {

using std::chrono::steady_clock;

// A gate the running task waits on, as a read in a hung mount would.
class Gate {
 public:
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  void WaitEntered() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return entered_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false;
  bool open_ = false;
};

// Collects answers (from any thread).
struct Answers {
  std::mutex mu;
  std::vector<absl::StatusCode> codes;
  std::function<void(const absl::Status&)> Sink() {
    return [this](const absl::Status& status) {
      std::lock_guard<std::mutex> lock(mu);
      codes.push_back(status.code());
    };
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return codes.size();
  }
};

TEST(ModelControlTest, FullQueueIsResourceExhaustedAndAbandonedCallsDoNotRun) {
  Gate gate;
  Answers answers;
  std::atomic<int> ran{0};
  ModelControl control({.max_pending = 2});
  ASSERT_TRUE(control
                  .Submit({.work =
                               [&] {
                                 gate.Wait();
                                 return absl::OkStatus();
                               },
                           .answer = answers.Sink(),
                           .what = "load of model 'slow'"})
                  .ok());
  gate.WaitEntered();
  std::atomic<bool> gave_up{false};
  ASSERT_TRUE(control
                  .Submit({.work =
                               [&] {
                                 ++ran;
                                 return absl::OkStatus();
                               },
                           .answer = answers.Sink(),
                           .abandoned = [&] { return gave_up.load(); },
                           .what = "load of model 'abandoned'"})
                  .ok());
  ASSERT_TRUE(control
                  .Submit({.work =
                               [&] {
                                 ++ran;
                                 return absl::OkStatus();
                               },
                           .answer = answers.Sink(),
                           .what = "load of model 'kept'"})
                  .ok());
  absl::Status full = control.Submit({.work =
                                          [&] {
                                            ++ran;
                                            return absl::OkStatus();
                                          },
                                      .answer = answers.Sink(),
                                      .what = "x"});
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  gave_up = true;
  gate.Open();
  // Stop() answers what is still queued UNAVAILABLE, so wait for the queue to drain first.
  for (int i = 0; i < 1000 && answers.size() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(control.Stop(steady_clock::now() + std::chrono::seconds(10)));
  ASSERT_EQ(answers.codes.size(), 3u);
  EXPECT_EQ(answers.codes[0], absl::StatusCode::kOk);
  EXPECT_EQ(answers.codes[1], absl::StatusCode::kCancelled);  // its client gave up: not run
  EXPECT_EQ(answers.codes[2], absl::StatusCode::kOk);
  EXPECT_EQ(ran.load(), 1);
}

TEST(ModelControlTest, StopHoldsItsDeadlineWhileATaskIsStuck) {
  Gate gate;
  Answers answers;
  auto control = std::make_unique<ModelControl>();
  ASSERT_TRUE(control
                  ->Submit({.work =
                                [&] {
                                  gate.Wait();
                                  return absl::OkStatus();
                                },
                            .answer = answers.Sink(),
                            .what = "load of model 'stuck'"})
                  .ok());
  gate.WaitEntered();
  ASSERT_TRUE(control
                  ->Submit({.work = [] { return absl::OkStatus(); },
                            .answer = answers.Sink(),
                            .what = "load of model 'queued'"})
                  .ok());
  const auto start = steady_clock::now();
  EXPECT_FALSE(control->Stop(start + std::chrono::milliseconds(200)));
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(2));
  // Both callers are answered UNAVAILABLE at once: the queued one and the stuck one.
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers.codes[0], absl::StatusCode::kUnavailable);
  EXPECT_EQ(answers.codes[1], absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::IsUnavailable(control->Submit(
      {.work = [] { return absl::OkStatus(); }, .answer = answers.Sink(), .what = "late"})));
  // In the server the process now ends with _exit(); here the task comes unstuck, its answer is
  // not sent twice, and the thread is joined.
  gate.Open();
  EXPECT_TRUE(control->Stop());
  EXPECT_EQ(answers.size(), 2u);
}

}  // namespace
}  // namespace sluice::server
