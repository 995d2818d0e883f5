#include "engine/batch_policy.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

using std::chrono::microseconds;
using TimePoint = std::chrono::steady_clock::time_point;

// A fixed "now" far from the epoch, so that "now - delay" is still a valid time.
const TimePoint kNow = TimePoint{} + std::chrono::hours(1);
constexpr TimePoint kNever = TimePoint::max();
// DecideBatch's executor_idle: the executor has nothing in flight, or it is busy.
constexpr bool kIdle = true;
constexpr bool kBusy = false;

BatchPolicy Batching(int max_batch_size, microseconds delay, std::vector<int> preferred = {}) {
  BatchPolicy policy;
  policy.max_batch_size = max_batch_size;
  policy.batching_enabled = true;
  policy.max_queue_delay = delay;
  policy.preferred_batch_sizes = std::move(preferred);
  return policy;
}

// Requests of the given batch sizes, the first enqueued `age` before kNow and each later one a
// microsecond after the previous.
std::vector<PendingRequest> Queue(std::vector<int> sizes, microseconds age = microseconds(0)) {
  std::vector<PendingRequest> pending;
  TimePoint t = kNow - age;
  for (int size : sizes) {
    pending.push_back(PendingRequest{size, t});
    t += microseconds(1);
  }
  return pending;
}

TEST(BatchPolicyTest, EmptyQueueWaitsForAnArrival) {
  const BatchDecision decision =
      DecideBatch(Batching(8, microseconds(100)), {}, /*more_incompatible=*/false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 0);
  EXPECT_EQ(decision.wake_at, kNever);
}

TEST(BatchPolicyTest, EmptyQueueWaitsEvenWhenBatchingIsOff) {
  BatchPolicy policy;
  const BatchDecision decision = DecideBatch(policy, {}, /*more_incompatible=*/true, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 0);
  EXPECT_EQ(decision.wake_at, kNever);
}

TEST(BatchPolicyTest, BatchingOffTakesOneRequest) {
  BatchPolicy policy;
  policy.max_batch_size = 8;
  policy.batching_enabled = false;
  policy.max_queue_delay = microseconds(1000);
  const std::vector<PendingRequest> pending = Queue({1, 1, 1});
  const BatchDecision decision = DecideBatch(policy, pending, false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 1);
}

TEST(BatchPolicyTest, MaxBatchSizeOneTakesOneRequest) {
  const std::vector<PendingRequest> pending = Queue({1, 1, 1});
  const BatchDecision decision =
      DecideBatch(Batching(1, microseconds(1000)), pending, false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 1);
}

TEST(BatchPolicyTest, FlushesAtMaxBatchSize) {
  // Four fresh requests of one item fill a batch of 4: no reason to wait for the delay.
  const std::vector<PendingRequest> pending = Queue({1, 1, 1, 1});
  const BatchDecision decision =
      DecideBatch(Batching(4, microseconds(1000000)), pending, false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 4);
}

TEST(BatchPolicyTest, FlushesAtMaxBatchSizeCountingItems) {
  // 2 + 2 items reach max_batch_size 4 with two requests; the third waits for the next batch.
  const std::vector<PendingRequest> pending = Queue({2, 2, 1});
  const BatchDecision decision =
      DecideBatch(Batching(4, microseconds(1000000)), pending, false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 2);
}

TEST(BatchPolicyTest, TakesWhatFitsWhenTheNextRequestWouldOverflow) {
  // 3 + 2 > 4: the first request alone is flushed at once (the batch cannot grow).
  const std::vector<PendingRequest> pending = Queue({3, 2});
  const BatchDecision decision =
      DecideBatch(Batching(4, microseconds(1000000)), pending, false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 1);
}

TEST(BatchPolicyTest, OversizedRequestRunsAlone) {
  const std::vector<PendingRequest> pending = Queue({6, 1});
  const BatchDecision decision =
      DecideBatch(Batching(4, microseconds(1000000)), pending, false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 1);
}

TEST(BatchPolicyTest, OversizedSingleRequestRunsAlone) {
  const std::vector<PendingRequest> pending = Queue({6});
  const BatchDecision decision =
      DecideBatch(Batching(4, microseconds(1000000)), pending, false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 1);
}

TEST(BatchPolicyTest, IncompatibleRequestBehindFlushesAtOnce) {
  const std::vector<PendingRequest> pending = Queue({1, 1});
  const BatchDecision decision = DecideBatch(Batching(8, microseconds(1000000)), pending,
                                             /*more_incompatible=*/true, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 2);
}

TEST(BatchPolicyTest, WaitsUntilTheOldestRequestsDelayExpires) {
  // The oldest request has waited 30us of its 100us.
  const std::vector<PendingRequest> pending = Queue({1, 1}, microseconds(30));
  const BatchDecision decision =
      DecideBatch(Batching(8, microseconds(100)), pending, false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 0);
  EXPECT_EQ(decision.wake_at, pending.front().enqueue_time + microseconds(100));
  EXPECT_EQ(decision.wake_at, kNow + microseconds(70));
}

TEST(BatchPolicyTest, DelayCountsFromTheOldestEvenWhenItIsNotTheHead) {
  // With priority levels a fresh level-1 request heads a lower level's old one: the old one's
  // delay is what expires.
  std::vector<PendingRequest> pending = {PendingRequest{1, kNow - microseconds(10)},
                                         PendingRequest{1, kNow - microseconds(100)}};
  EXPECT_EQ(DecideBatch(Batching(8, microseconds(100)), pending, false, kIdle, kNow).request_count,
            2);
  pending[1].enqueue_time = kNow - microseconds(40);
  const BatchDecision decision =
      DecideBatch(Batching(8, microseconds(100)), pending, false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 0);
  EXPECT_EQ(decision.wake_at, kNow + microseconds(60));
}

TEST(BatchPolicyTest, TakesAllThatFitsOnceTheDelayExpired) {
  const std::vector<PendingRequest> pending = Queue({1, 2, 1}, microseconds(100));
  const BatchDecision decision =
      DecideBatch(Batching(8, microseconds(100)), pending, false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 3);
}

TEST(BatchPolicyTest, DelayExpiresExactlyAtTheDeadline) {
  const std::vector<PendingRequest> pending = Queue({1});
  const BatchPolicy policy = Batching(8, microseconds(100));
  EXPECT_EQ(DecideBatch(policy, pending, false, kIdle, kNow + microseconds(99)).request_count, 0);
  EXPECT_EQ(DecideBatch(policy, pending, false, kIdle, kNow + microseconds(100)).request_count, 1);
}

TEST(BatchPolicyTest, ZeroDelayTakesWhatIsQueued) {
  const std::vector<PendingRequest> pending = Queue({1, 1, 1});
  const BatchDecision decision =
      DecideBatch(Batching(8, microseconds(0)), pending, false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 3);
}

TEST(BatchPolicyTest, ExpiredDelayStillRespectsMaxBatchSize) {
  const std::vector<PendingRequest> pending = Queue({2, 2, 2}, microseconds(500));
  const BatchDecision decision =
      DecideBatch(Batching(5, microseconds(100)), pending, false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 2);
}

// Preferred batch sizes, table-driven: fresh requests (delay far from expired).
struct PreferredCase {
  std::string name;
  int max_batch_size;
  std::vector<int> preferred;
  std::vector<int> sizes;
  int expected_count;
};

class PreferredBatchSizeTest : public ::testing::TestWithParam<PreferredCase> {};

TEST_P(PreferredBatchSizeTest, TakesTheLongestPreferredPrefix) {
  const PreferredCase& c = GetParam();
  const std::vector<PendingRequest> pending = Queue(c.sizes);
  const BatchDecision decision = DecideBatch(
      Batching(c.max_batch_size, microseconds(1000000), c.preferred), pending, false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, c.expected_count);
  if (c.expected_count == 0) {
    EXPECT_EQ(decision.wake_at, kNow + microseconds(1000000));
  }
}

INSTANTIATE_TEST_SUITE_P(
    BatchPolicyTest, PreferredBatchSizeTest,
    ::testing::Values(
        // {2,4} with three single items pending: 2 is reachable, 4 is not yet.
        PreferredCase{"ThreeOfOneTakesTwo", 8, {2, 4}, {1, 1, 1}, 2},
        // Both reachable: the largest (longest prefix) wins.
        PreferredCase{"FiveOfOneTakesFour", 8, {2, 4}, {1, 1, 1, 1, 1}, 4},
        // Unsorted preferred sizes.
        PreferredCase{"UnsortedPreferred", 8, {4, 2}, {1, 1, 1, 1, 1}, 4},
        // Item counts, not request counts: 1+2 = 3 is preferred.
        PreferredCase{"CountsItems", 8, {3}, {1, 2, 1}, 2},
        // Prefixes reach 1, 3, 4 items: 2 is never a prefix sum, so nothing is preferred yet.
        PreferredCase{"UnreachablePreferredWaits", 8, {2}, {1, 2, 1}, 0},
        // One item below the only preferred size: keep waiting.
        PreferredCase{"BelowPreferredWaits", 8, {4}, {1, 1, 1}, 0},
        // A single request of a preferred size.
        PreferredCase{"SingleRequestOfPreferredSize", 8, {2}, {2}, 1}),
    [](const ::testing::TestParamInfo<PreferredCase>& info) { return info.param.name; });

// --- Ragged batching: the token budget (max_batch_tokens) -------------------------------------

BatchPolicy Ragged(int max_batch_size, int64_t max_batch_tokens, microseconds delay,
                   std::vector<int> preferred = {}) {
  BatchPolicy policy = Batching(max_batch_size, delay, std::move(preferred));
  policy.max_batch_tokens = max_batch_tokens;
  return policy;
}

// Requests of one item each with the given token counts, the first enqueued `age` before kNow and
// each later one a microsecond after the previous.
std::vector<PendingRequest> Sequences(std::vector<int64_t> tokens,
                                      microseconds age = microseconds(0)) {
  std::vector<PendingRequest> pending;
  TimePoint t = kNow - age;
  for (int64_t count : tokens) {
    pending.push_back(PendingRequest{.batch_size = 1, .enqueue_time = t, .tokens = count});
    t += microseconds(1);
  }
  return pending;
}

TEST(BatchPolicyTest, TokenBudgetCutsTheBatchWhereTheNextRequestWouldOverflowIt) {
  // 40 + 50 tokens fit in 100; 30 more would not: the batch is full now, well under 8 items and
  // long before the delay.
  const std::vector<PendingRequest> pending = Sequences({40, 50, 30});
  const BatchDecision decision =
      DecideBatch(Ragged(8, 100, microseconds(1000000)), pending, false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 2);
}

TEST(BatchPolicyTest, TokenBudgetReachedExactlyFlushesAtOnce) {
  const std::vector<PendingRequest> pending = Sequences({60, 40});
  const BatchDecision decision =
      DecideBatch(Ragged(8, 100, microseconds(1000000)), pending, false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 2);
}

TEST(BatchPolicyTest, UnderTheTokenBudgetWaitsForTheDelay) {
  const std::vector<PendingRequest> pending = Sequences({10, 20}, microseconds(30));
  const BatchDecision decision =
      DecideBatch(Ragged(8, 100, microseconds(100)), pending, false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 0);
  EXPECT_EQ(decision.wake_at, kNow - microseconds(30) + microseconds(100));
  // Once the oldest waited the delay, what fits goes.
  const BatchDecision later = DecideBatch(Ragged(8, 100, microseconds(100)), pending, false, kIdle,
                                          kNow + microseconds(70));
  EXPECT_EQ(later.request_count, 2);
}

TEST(BatchPolicyTest, RequestAboveTheTokenBudgetRunsAloneAtOnce) {
  // At the head of the queue: alone, now (waiting cannot make it fit, and it must not starve).
  const BatchDecision head =
      DecideBatch(Ragged(8, 100, microseconds(1000000)), Sequences({500, 10}), false, kIdle, kNow);
  EXPECT_EQ(head.request_count, 1);
  const BatchDecision only =
      DecideBatch(Ragged(8, 100, microseconds(1000000)), Sequences({500}), false, kIdle, kNow);
  EXPECT_EQ(only.request_count, 1);
  // Behind others: it cuts their batch (they go now, without it), and is the next head.
  const BatchDecision behind = DecideBatch(Ragged(8, 100, microseconds(1000000)),
                                           Sequences({10, 20, 500}), false, kIdle, kNow);
  EXPECT_EQ(behind.request_count, 2);
}

TEST(BatchPolicyTest, MaxBatchSizeStillBoundsARaggedBatch) {
  // 3 sequences of 1 token: far under the budget, but max_batch_size is 2.
  const BatchDecision decision =
      DecideBatch(Ragged(2, 1000, microseconds(1000000)), Sequences({1, 1, 1}), false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 2);
}

TEST(BatchPolicyTest, TokenBudgetCountsTheTokensOfMultiItemRequests) {
  // A request of 2 sequences with 30 tokens in all, then one of 3 with 80: 110 > 100.
  std::vector<PendingRequest> pending = {
      PendingRequest{.batch_size = 2, .enqueue_time = kNow, .tokens = 30},
      PendingRequest{.batch_size = 3, .enqueue_time = kNow, .tokens = 80}};
  const BatchDecision decision =
      DecideBatch(Ragged(8, 100, microseconds(1000000)), pending, false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 1);
}

TEST(BatchPolicyTest, NoTokenBudgetIgnoresTokens) {
  // max_batch_tokens 0 (a model without ragged batching): tokens never cut a batch.
  const BatchDecision decision = DecideBatch(Ragged(4, 0, microseconds(1000000)),
                                             Sequences({5000, 5000, 5000}), false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 0);
  const BatchDecision full = DecideBatch(Ragged(4, 0, microseconds(1000000)),
                                         Sequences({5000, 5000, 5000, 5000}), false, kIdle, kNow);
  EXPECT_EQ(full.request_count, 4);
}

TEST(BatchPolicyTest, PreferredSizeWithinTheTokenBudget) {
  // Preferred batch size 2: the first two sequences go at once; all three would fit too, but 3 is
  // not preferred and neither limit is reached.
  const BatchDecision decision = DecideBatch(Ragged(8, 100, microseconds(1000000), {2}),
                                             Sequences({10, 10, 10}), false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 2);
  // A preferred size the budget cannot reach is not taken: 2 sequences would be 120 tokens.
  const BatchDecision over = DecideBatch(Ragged(8, 100, microseconds(1000000), {2}),
                                         Sequences({60, 60}), false, kIdle, kNow);
  EXPECT_EQ(over.request_count, 1);  // full: the second would overflow the budget
}

TEST(BatchPolicyTest, IncompatibleRequestBehindARaggedBatchFlushesIt) {
  const BatchDecision decision =
      DecideBatch(Ragged(8, 100, microseconds(1000000)), Sequences({10, 20}),
                  /*more_incompatible=*/true, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 2);
}

// --- Work-conserving batching (max_queue_delay 0, the default) --------------------------------

TEST(BatchPolicyTest, WorkConservingIdleExecutorTakesALoneRequestAtOnce) {
  // Concurrency 1: nobody else is coming; waiting would only add latency.
  const BatchDecision decision =
      DecideBatch(Batching(64, microseconds(0)), Queue({1}), false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 1);
}

TEST(BatchPolicyTest, WorkConservingBusyExecutorLetsThePartialBatchGrow) {
  // Every executor works: the requests wait for one to be idle, however long they waited, and
  // only an arrival or a freed slot can change that (no timed wake-up, no polling).
  const BatchDecision decision = DecideBatch(
      Batching(64, microseconds(0)), Queue({1, 1, 1}, microseconds(100000)), false, kBusy, kNow);
  EXPECT_EQ(decision.request_count, 0);
  EXPECT_EQ(decision.wake_at, kNever);
}

TEST(BatchPolicyTest, WorkConservingBusyExecutorTakesAFullBatchIntoAFreeSlot) {
  EXPECT_EQ(DecideBatch(Batching(4, microseconds(0)), Queue({1, 1, 1, 1, 1}), false, kBusy, kNow)
                .request_count,
            4);
  // A preferred size is full enough too.
  EXPECT_EQ(DecideBatch(Batching(8, microseconds(0), {2}), Queue({1, 1, 1}), false, kBusy, kNow)
                .request_count,
            2);
  // So is the token budget, and an incompatible request behind the head.
  EXPECT_EQ(
      DecideBatch(Ragged(8, 100, microseconds(0)), Sequences({60, 30, 20}), false, kBusy, kNow)
          .request_count,
      2);
  EXPECT_EQ(
      DecideBatch(Batching(8, microseconds(0)), Queue({1}), /*more_incompatible=*/true, kBusy, kNow)
          .request_count,
      1);
}

TEST(BatchPolicyTest, QueueDelayKeepsTritonsMeaningEvenWhenTheExecutorIsIdle) {
  // A configured max_queue_delay_microseconds: the lone request waits for company up to it.
  const BatchDecision decision =
      DecideBatch(Batching(64, microseconds(200)), Queue({1}), false, kIdle, kNow);
  EXPECT_EQ(decision.request_count, 0);
  EXPECT_EQ(decision.wake_at, kNow + microseconds(200));
  // And once it expired, what is queued goes even to a busy executor's free slot.
  EXPECT_EQ(DecideBatch(Batching(64, microseconds(200)), Queue({1, 1}, microseconds(200)), false,
                        kBusy, kNow)
                .request_count,
            2);
}

TEST(BatchPolicyTest, BatchingOffTakesOneEvenForABusyExecutor) {
  BatchPolicy policy;
  policy.max_batch_size = 8;
  EXPECT_EQ(DecideBatch(policy, Queue({1, 1}), false, kBusy, kNow).request_count, 1);
}

}  // namespace
}  // namespace sluice::engine
