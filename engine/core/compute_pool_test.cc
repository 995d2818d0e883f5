#include "engine/core/compute_pool.h"

#include <sched.h>

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::engine {
namespace {

TEST(ComputePoolTest, RunsEveryTaskOnceWithDistinctConcurrentWorkers) {
  ComputePool pool(4);
  EXPECT_EQ(pool.threads(), 4);
  for (int round = 0; round < 2000; ++round) {
    const int tasks = 1 + round % 37;
    std::vector<std::atomic<int>> runs(static_cast<size_t>(tasks));
    std::vector<std::atomic<int>> busy(4);
    std::atomic<bool> overlap{false};
    pool.ParallelFor(tasks, [&](int task, int worker) {
      ASSERT_GE(worker, 0);
      ASSERT_LT(worker, 4);
      if (busy[static_cast<size_t>(worker)].fetch_add(1) != 0) overlap = true;
      runs[static_cast<size_t>(task)].fetch_add(1);
      busy[static_cast<size_t>(worker)].fetch_sub(1);
    });
    for (int t = 0; t < tasks; ++t) ASSERT_EQ(runs[static_cast<size_t>(t)].load(), 1) << round;
    ASSERT_FALSE(overlap.load()) << "two tasks ran at once as one worker, round " << round;
  }
}

TEST(ComputePoolTest, HelpersTakeTasksWhenTheCallerIsBusy) {
  ComputePool pool(2);
  // The caller's first task waits until another worker has run a task: only a helper can.
  std::atomic<bool> helper_ran{false};
  pool.ParallelFor(2, [&](int, int worker) {
    if (worker != 0) {
      helper_ran = true;
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!helper_ran.load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
  });
  EXPECT_TRUE(helper_ran.load());
}

TEST(ComputePoolTest, ABusyPoolRunsASecondCallerInline) {
  ComputePool pool(2);
  std::atomic<bool> inner_started{false};
  std::atomic<bool> release{false};
  std::thread first([&] {
    pool.ParallelFor(2, [&](int, int) {
      inner_started = true;
      while (!release.load()) std::this_thread::yield();
    });
  });
  while (!inner_started.load()) std::this_thread::yield();
  std::vector<int> workers;
  pool.ParallelFor(3, [&](int, int worker) { workers.push_back(worker); });  // inline: no race
  EXPECT_EQ(workers, (std::vector<int>{0, 0, 0}));
  release = true;
  first.join();
}

TEST(ComputePoolTest, OneThreadRunsEverythingOnTheCaller) {
  ComputePool pool(1);
  const std::thread::id caller = std::this_thread::get_id();
  int count = 0;
  pool.ParallelFor(5, [&](int, int worker) {
    EXPECT_EQ(worker, 0);
    EXPECT_EQ(std::this_thread::get_id(), caller);
    ++count;
  });
  EXPECT_EQ(count, 5);
}

TEST(ComputePoolTest, SleepingHelpersWakeForTheNextJob) {
  ComputePool pool(3);
  for (int round = 0; round < 20; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // past the spin: helpers sleep
    std::atomic<int> sum{0};
    pool.ParallelFor(100, [&](int task, int) { sum += task; });
    ASSERT_EQ(sum.load(), 4950);
  }
}

TEST(UsableCpusTest, FollowsTheAffinityMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  const CpuBudget all = UsableCpus();
  EXPECT_GE(all.cpus, 1);
  EXPECT_EQ(all.affinity_cpus, CPU_COUNT(&saved));
  EXPECT_LE(all.cpus, all.affinity_cpus);
  // Pinned to one CPU (as `taskset -c N` would), the budget is one.
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &saved)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const CpuBudget pinned = UsableCpus();
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(pinned.affinity_cpus, 1);
  EXPECT_EQ(pinned.cpus, 1);
  EXPECT_NE(pinned.Describe().find("1 CPU (affinity 1"), std::string::npos) << pinned.Describe();
}

}  // namespace
}  // namespace sluice::engine
