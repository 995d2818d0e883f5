#pragma once

// Engine: the facade the server talks to. It owns the loaded models (each version with its
// scheduler, executors and stats), validates and submits requests, and reports state and stats.
// No gRPC, protobuf or Prometheus type appears here.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "common/log.h"
#include "engine/core/backend.h"
#include "engine/core/inference_request.h"
#include "engine/core/model_config.h"
#include "engine/core/model_stats.h"
#include "engine/device.h"
#include "engine/model_version_table.h"
#include "engine/preparation_pool.h"
#include "engine/stats_collector.h"

namespace sluice::engine {

struct EngineOptions {
  // Time source for queue delays and deadlines; borrowed. Default: the steady clock.
  const common::Clock* clock = &common::SteadyClock::Default();
  // Borrowed, nullable (then nothing is logged).
  common::Logger* logger = nullptr;
  // Queue bound (requests) for a model whose config sets no max_queue_size.
  int64_t default_max_queue_size = 4096;
  // In-flight batches per model instance on the CPU backend (with more than one instance, or
  // without cpu_single_instance_on_batcher: a model whose batches run on its batcher thread has
  // one at a time).
  int executor_slots = 2;
  // A model with one instance on the CPU backend computes and answers its batches on its
  // scheduler's batcher thread (no executor threads, no hand-off between the queue and the
  // answers); false: on the executor's issue and completion threads, as models with more
  // instances always do. sluice-server --cpu-batcher-runs-batches.
  bool cpu_single_instance_on_batcher = true;
  // In-flight batches per model instance on a GPU: three, so that one batch copies in while one
  // computes and one copies out.
  int gpu_executor_slots = 3;
  // Where models run (SelectDevice). On a CUDA device every model whose instance_group kind is
  // not KIND_CPU and that has a GPU implementation gets one CudaExecutor per instance (on the GPU
  // instance_group's `gpus` names, else on this device); the others run on the CPU backend.
  DeviceSelection device = {};
  // Period of the stats collector thread, which reads the executors' item counters and computes
  // each model's throughput (ModelStatsSnapshot::device_items, throughput_items_per_second).
  // 0: no collector thread (those two fields stay 0); CollectStats() may still be called.
  std::chrono::milliseconds stats_interval{0};
  // Fraction of requests (0..1) that get an access-log record (model, version, id, batch, queue
  // and compute time, status) at info level through `logger`. 0: none.
  double access_log_sample_rate = 0;
  // The preparation pool (engine/preparation_pool.h) that tokenizes text inputs off the RPC
  // threads: its worker threads, and how many requests may wait for them before Submit answers
  // RESOURCE_EXHAUSTED.
  int preparation_threads = 2;
  int64_t preparation_queue_size = 1024;
  // The compute pool's threads (engine/core/compute_pool.h), shared by every CPU model: each
  // batch's GEMMs, attention and row-wise kernels are split over them. 0: the CPUs this process
  // may use (UsableCpus: affinity mask and cgroup CPU quota). sluice-server --compute-threads.
  int compute_threads = 0;
  // Test-only, empty in production: called on a model instance's executor thread before each batch
  // with the model's name, version and the instance's index; a non-OK status faults that batch as
  // a CUDA error would (fault_injection.h builds one from SLUICE_TEST_FAULT_INJECT).
  std::function<absl::Status(absl::string_view model, int64_t version, int instance)>
      before_batch_for_test{};
  // Test-only, empty in production: called in Submit() right after the drain check, before the
  // request is validated and queued (a test holds a Submit there to check the drain waits for it).
  std::function<void()> during_submit_for_test{};
  // Called once, on an executor thread, when an executor fault is process-fatal
  // (engine/core/device_fault.h: a sticky CUDA error, after which the process's device context is
  // unusable). Before the call the engine has logged the fault once, stopped taking requests
  // (Submit answers UNAVAILABLE, IsModelReady is false) and failed every model's queue; batches
  // in flight fail on their own (their waits return the same sticky error). The owner turns
  // liveness and readiness false, drains and exits non-zero, so that the orchestrator restarts
  // the process (sluice-server exits 3). Must not block. Empty: only the above.
  std::function<void(const absl::Status& fault)> on_process_fatal{};
};

// Thread-safe.
class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(EngineOptions options);
  // Shutdown()s.
  ~Engine();

  // Creates, warms up and starts a model version; blocks until it is READY or failed. A failure
  // is returned and recorded (state UNAVAILABLE with the reason) without touching other models.
  // Loading a version that is already loaded replaces it once the new one is ready; this is also
  // how a version that faulted (an executor fault: UNAVAILABLE with the fault as its reason;
  // its requests answered UNAVAILABLE) recovers.
  absl::Status LoadModel(ModelSpec spec);

  // Unloads every version of `name`: new requests are refused, queued and in-flight ones are
  // answered, then its threads and memory are freed. Also forgets the name's failed loads.
  // NotFound if nothing of that name is loaded or failed.
  absl::Status UnloadModel(const std::string& name);

  // Unloads one version of `name`, as UnloadModel does. NotFound if it is not loaded.
  absl::Status UnloadModelVersion(const std::string& name, int64_t version);

  // Records that `name` failed before any version could be built (its config, its folder):
  // `reason` replaces its failed loads, Submit and GetModel answer UNAVAILABLE with it for every
  // version, and ListModels lists it as version ModelVersionTable::kWholeModel, UNAVAILABLE.
  // Forgotten by the next LoadModel of `name` and by UnloadModel. REQUIRES: nothing of `name` is
  // loaded (unload it first).
  void RecordModelFailure(const std::string& name, std::string reason);

  // Validates the request against the model's config and queues it. Always takes ownership and
  // always answers the request exactly once: at once with NOT_FOUND (unknown model or version),
  // UNAVAILABLE (not ready, or draining), INVALID_ARGUMENT (names the tensor and what was
  // expected) or RESOURCE_EXHAUSTED (queue full); otherwise later from an engine thread.
  void Submit(std::unique_ptr<InferenceRequest> request);

  // The config of a ready version (`version` < 0: the newest ready one), and that version.
  struct ModelInfo {
    std::shared_ptr<const ModelConfig> config;
    // The parameters its load resolved, with the values that serve in place of `config`'s
    // (Model::ResolvedParameters: the encoder's `precision`, auto as what it chose); what
    // ModelConfig shows.
    std::map<std::string, std::string> resolved_parameters;
    int64_t version = 0;
    std::vector<int64_t> ready_versions;
  };
  absl::StatusOr<ModelInfo> GetModel(const std::string& name, int64_t version) const;
  bool IsModelReady(const std::string& name, int64_t version) const;

  // Every version the engine knows, sorted by name and version (including failed loads).
  std::vector<ModelVersionStatus> ListModels() const;

  // Stats of the loaded versions of `name` (`version` < 0: all), or of every model if `name` is
  // empty. NotFound for an unknown name or version.
  struct VersionStats {
    std::string name;
    int64_t version = 0;
    ModelStatsSnapshot stats;
    // The parameters its load resolved (Model::ResolvedParameters: the encoder's `precision`).
    std::map<std::string, std::string> resolved_parameters;
  };
  absl::StatusOr<std::vector<VersionStats>> GetStats(const std::string& name,
                                                     int64_t version) const;

  // One collection of the stats collector: reads every loaded version's executor item counters
  // and records them with `now` (throughput = items since the previous call / time since it).
  // Runs on the collector thread every EngineOptions::stats_interval; public for embedders that
  // collect on their own schedule, and for tests. Never call it on a request path: on a GPU it
  // waits for a copy of the device counters.
  void CollectStats(std::chrono::steady_clock::time_point now);

  // From now on Submit() answers UNAVAILABLE. Queued and in-flight requests still run.
  void BeginDrain();
  bool draining() const;
  // Blocks until nothing is queued or in flight in any model and no Submit() call is still on its
  // way to a queue, or `timeout` passed; returns whether it became idle. A Submit that passed the
  // drain check before BeginDrain() is waited for like a queued request (it is served, not
  // refused by the stopped queue that Shutdown() leaves).
  bool WaitIdle(std::chrono::milliseconds timeout) const;
  // Stops every model (answering what is queued) and frees them. Idempotent.
  void Shutdown();

 private:
  using LoadedModel = LoadedVersion;
  explicit Engine(EngineOptions options);
  absl::StatusOr<std::shared_ptr<LoadedModel>> Build(const ModelSpec& spec);
  // ExecutorOptions::on_fault of `model`'s instance `instance`, on that executor's thread: marks
  // the version UNAVAILABLE with the reason and fails its queue (ModelScheduler::Fail).
  void OnExecutorFault(LoadedModel& model, int instance, const absl::Status& fault);
  // A preparation pool job: prepares `request` (validated for `model`) and enqueues it, or
  // answers it (cancelled, past its deadline, or a preparation error).
  // `submitted`: when Submit queued it (the start of its tokenize phase).
  void Prepare(LoadedModel& model, std::unique_ptr<InferenceRequest> request,
               std::chrono::steady_clock::time_point submitted);

  const EngineOptions options_;
  // Loaded, faulted and failed versions (engine/model_version_table.h); its own lock.
  ModelVersionTable versions_;
  std::atomic<bool> draining_{false};
  // Submit() calls between their entry and the end of their hand-off (queue or preparation pool).
  // With draining_ it closes the drain's race: Submit increments before it reads draining_, and
  // WaitIdle reads it after BeginDrain set draining_ (both sequentially consistent), so either the
  // Submit sees the drain and refuses, or WaitIdle sees the Submit and waits for it.
  std::atomic<int64_t> submits_in_progress_{0};
  // Set by the first process-fatal fault (OnExecutorFault); Submit's answer then says why.
  std::atomic<bool> process_fatal_{false};
  // The collector thread (null when stats_interval is 0); set once by Create(), stopped by
  // Shutdown() before any model is freed.
  std::unique_ptr<StatsCollector> collector_;
  // Tokenizes text requests before they are enqueued; set once by Create(), stopped (its queue
  // run) by Shutdown() before the schedulers.
  std::unique_ptr<PreparationPool> preparation_;
  std::shared_ptr<ComputePool> compute_;
};

}  // namespace sluice::engine
