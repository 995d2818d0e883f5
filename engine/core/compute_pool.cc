#include "engine/core/compute_pool.h"

#include <sched.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace sluice::engine {
namespace {

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// A cgroup's quota in CPUs: v2's cpu.max ("max 100000" or "200000 100000"), else v1's
// cfs_quota_us / cfs_period_us (-1: none). 0 where none is set or none can be read. Read at the
// cgroup namespace's root, which inside a container is the container's own cgroup.
double CgroupQuotaCpus() {
  if (std::ifstream v2("/sys/fs/cgroup/cpu.max"); v2) {
    std::string quota;
    double period = 0;
    if (v2 >> quota >> period && quota != "max" && period > 0) {
      return std::strtod(quota.c_str(), nullptr) / period;
    }
    return 0;
  }
  for (const char* dir : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
    std::ifstream quota_file(absl::StrCat(dir, "/cpu.cfs_quota_us"));
    std::ifstream period_file(absl::StrCat(dir, "/cpu.cfs_period_us"));
    double quota = 0;
    double period = 0;
    if (quota_file >> quota && period_file >> period && quota > 0 && period > 0) {
      return quota / period;
    }
  }
  return 0;
}

// How long a helper spins for the next job before it sleeps. SLUICE_COMPUTE_SPIN_US overrides
// (experiments; 0: sleep at once).
std::chrono::microseconds SpinBudget() {
  static const std::chrono::microseconds budget = [] {
    const char* value = std::getenv("SLUICE_COMPUTE_SPIN_US");
    if (value == nullptr) return std::chrono::microseconds(100);
    return std::chrono::microseconds(std::max(0L, std::atol(value)));
  }();
  return budget;
}

}  // namespace

std::string CpuBudget::Describe() const {
  return absl::StrCat(cpus, cpus == 1 ? " CPU" : " CPUs", " (affinity ", affinity_cpus,
                      quota_cpus > 0 ? absl::StrCat(", cgroup CPU quota ", quota_cpus)
                                     : std::string(", no cgroup CPU quota"),
                      ")");
}

CpuBudget UsableCpus() {
  CpuBudget budget;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    budget.affinity_cpus = CPU_COUNT(&set);
  } else {
    budget.affinity_cpus = static_cast<int>(std::thread::hardware_concurrency());
  }
  budget.affinity_cpus = std::max(budget.affinity_cpus, 1);
  budget.quota_cpus = CgroupQuotaCpus();
  budget.cpus = budget.affinity_cpus;
  if (budget.quota_cpus > 0) {
    budget.cpus = std::min(budget.cpus, static_cast<int>(std::ceil(budget.quota_cpus - 1e-9)));
  }
  budget.cpus = std::max(budget.cpus, 1);
  return budget;
}

ComputePool::ComputePool(int threads) : threads_(std::max(threads, 1)) {
  helpers_.reserve(static_cast<size_t>(threads_ - 1));
  for (int worker = 1; worker < threads_; ++worker) {
    helpers_.emplace_back([this, worker] { HelperLoop(worker); });
  }
}

ComputePool::~ComputePool() {
  {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& helper : helpers_) helper.join();
}

void ComputePool::RunTasks(int worker) {
  for (int task = next_task_.fetch_add(1, std::memory_order_relaxed); task < tasks_;
       task = next_task_.fetch_add(1, std::memory_order_relaxed)) {
    (*fn_)(task, worker);
    done_tasks_.fetch_add(1, std::memory_order_release);
  }
}

void ComputePool::ParallelFor(int tasks, absl::FunctionRef<void(int task, int worker)> fn) {
  if (tasks <= 0) return;
  if (tasks == 1 || threads_ == 1 || !caller_mutex_.try_lock()) {
    for (int task = 0; task < tasks; ++task) fn(task, 0);
    return;
  }
  // Publish: the fields first, then the generation (seq_cst, so a helper that reads it sees them).
  const uint64_t generation = ++generation_;
  tasks_ = tasks;
  fn_ = &fn;
  next_task_.store(0, std::memory_order_relaxed);
  done_tasks_.store(0, std::memory_order_relaxed);
  open_.store(generation);
  published_.store(generation);
  // A helper that is about to sleep raised sleepers_ before it re-reads published_ (both
  // seq_cst): either it sees this generation, or this sees it and wakes it.
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(sleep_mutex_); }
    wake_.notify_all();
  }
  RunTasks(0);
  while (done_tasks_.load(std::memory_order_acquire) < tasks) CpuRelax();
  // Close the job, then wait until no helper is inside it: a helper raises active_ before it
  // checks open_, so once active_ reads 0 after the close, no helper can still take a task of
  // this job (nor read fn_, which dies with this frame).
  open_.store(kClosed);
  while (active_.load() != 0) CpuRelax();
  caller_mutex_.unlock();
}

void ComputePool::HelperLoop(int worker) {
  uint64_t seen = 0;
  const std::chrono::microseconds budget = SpinBudget();
  while (true) {
    bool found = false;
    const auto spin_until = std::chrono::steady_clock::now() + budget;
    for (int i = 0; !found; ++i) {
      found = published_.load(std::memory_order_acquire) != seen;
      if (found) break;
      if ((i & 255) == 255 && std::chrono::steady_clock::now() >= spin_until) break;
      CpuRelax();
    }
    if (!found) {
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return stop_ || published_.load() != seen; });
      sleepers_.fetch_sub(1);
      if (stop_) return;
    }
    seen = published_.load();
    active_.fetch_add(1);
    if (open_.load() == seen) RunTasks(worker);
    active_.fetch_sub(1);
  }
}

}  // namespace sluice::engine
