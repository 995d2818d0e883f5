#include "server/http/byte_budget.h"

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::server::http {
namespace {

TEST(ByteBudgetTest, TakesWhatFitsAndRefusesTheRest) {
  ByteBudget budget(100);
  EXPECT_TRUE(budget.TryAcquire(60));
  EXPECT_FALSE(budget.TryAcquire(41));  // 101: refused, nothing taken
  EXPECT_EQ(budget.used_bytes(), 60u);
  EXPECT_TRUE(budget.TryAcquire(40));  // exactly the limit
  EXPECT_FALSE(budget.TryAcquire(1));
  budget.Release(60);
  EXPECT_TRUE(budget.TryAcquire(60));
  EXPECT_EQ(budget.used_bytes(), 100u);
}

TEST(ByteBudgetTest, HugeRequestsDoNotWrapAround) {
  ByteBudget budget(1000);
  ASSERT_TRUE(budget.TryAcquire(10));
  EXPECT_FALSE(budget.TryAcquire(UINT64_MAX));
  EXPECT_FALSE(budget.TryAcquire(UINT64_MAX - 5));
  EXPECT_EQ(budget.used_bytes(), 10u);
}

TEST(ByteBudgetTest, ConcurrentTakersNeverExceedTheLimit) {
  ByteBudget budget(1000);
  std::vector<std::thread> threads;
  std::atomic<int> over{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        if (budget.TryAcquire(7)) {
          if (budget.used_bytes() > 1000) over.fetch_add(1);
          budget.Release(7);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(over.load(), 0);
  EXPECT_EQ(budget.used_bytes(), 0u);
}

}  // namespace
}  // namespace sluice::server::http
