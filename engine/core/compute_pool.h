#pragma once

// ComputePool: the process's CPU compute threads, shared by every CPU model. A model's forward
// pass splits each step (a GEMM by column panels and row blocks, attention by sequence and head,
// the row-wise kernels by rows) into tasks and runs them with ParallelFor on the calling thread
// and the pool's helpers, so that one lone request uses every core the process may use
// (intra-op parallelism) and a batch under load keeps them all busy without more threads than
// cores.
//
// Why one shared pool rather than a thread count per model or per instance: N single-threaded
// instances leave a lone request on one core (a long sentence at 29 ms where ONNX Runtime, which
// splits it over both cores, takes 25: issue 33), and instances that each thread their own GEMMs
// oversubscribe the cores. One pool sized to the usable CPUs does neither.
//
// Sizing (UsableCpus): the CPUs in the process's affinity mask (sched_getaffinity: `taskset`,
// a container's cpuset), capped by its cgroup CPU quota (cgroup v2 cpu.max, v1 cfs_quota_us /
// cfs_period_us; rounded up), so a container limited to 2 CPUs on a 64-core host uses 2.
//
// The helpers spin for a short while after each job before they sleep: a forward pass issues a
// few dozen jobs back to back, and waking a sleeping thread costs tens of microseconds on a VM
// (docs/performance-history.md, issue 18), as much as a whole job of a short sentence. Between
// batches they sleep, so an idle server uses no CPU.
//
// One job runs at a time. A caller that finds the pool busy (another model's instance, or a
// second instance of one model) runs its tasks on its own thread: the cores are already busy, so
// waiting for the pool would only add latency, and running alone adds no thread to the cores'
// load beyond the caller itself.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace sluice::engine {

// What UsableCpus() found, for the load log.
struct CpuBudget {
  int cpus = 1;                  // what the pool should use: min(affinity, ceil(quota)), >= 1
  int affinity_cpus = 1;         // CPUs in the affinity mask (hardware_concurrency where unknown)
  double quota_cpus = 0;         // the cgroup CPU quota in CPUs; 0: none
  std::string Describe() const;  // "2 CPUs (affinity 2, no cgroup CPU quota)"
};
CpuBudget UsableCpus();

class ComputePool {
 public:
  // threads >= 1: the caller of ParallelFor counts as one, so threads - 1 helpers start.
  explicit ComputePool(int threads);
  ~ComputePool();  // joins the helpers; no ParallelFor may be running
  ComputePool(const ComputePool&) = delete;
  ComputePool& operator=(const ComputePool&) = delete;

  int threads() const { return threads_; }

  // Runs fn(task, worker) once for every task in [0, tasks), on the calling thread and the
  // helpers, and returns when all have run. `worker` is in [0, threads()) and no two tasks run at
  // once with the same worker, so a caller may keep per-worker scratch. Tasks take no locks of
  // the pool and must not call ParallelFor. With tasks <= 1, one thread, or the pool busy with
  // another caller's job, every task runs on the calling thread as worker 0.
  void ParallelFor(int tasks, absl::FunctionRef<void(int task, int worker)> fn);

 private:
  void HelperLoop(int worker);
  void RunTasks(int worker);

  const int threads_;
  std::vector<std::thread> helpers_;
  std::mutex caller_mutex_;  // held by the caller whose job is published

  // The published job. `open_` is the job's generation while its tasks may be taken, and
  // kClosed after the caller saw them all done; helpers announce themselves in `active_` before
  // they touch the job (see ParallelFor for the handshake).
  static constexpr uint64_t kClosed = 0;
  std::atomic<uint64_t> open_{kClosed};
  std::atomic<int> active_{0};
  std::atomic<int> next_task_{0};
  std::atomic<int> done_tasks_{0};
  int tasks_ = 0;
  absl::FunctionRef<void(int, int)>* fn_ = nullptr;
  uint64_t generation_ = 0;  // the caller's count of jobs (under caller_mutex_)

  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
  std::atomic<uint64_t> published_{0};  // the newest generation published (for the sleepers)
  bool stop_ = false;                   // under sleep_mutex_
};

}  // namespace sluice::engine
