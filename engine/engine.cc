#include "engine/engine.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/backend_registry.h"
#include "engine/core/device_fault.h"
#include "engine/core/load_limits.h"
#include "engine/executor_factory.h"
#include "engine/model_scheduler.h"
#include "engine/request_validation.h"

namespace sluice::engine {

namespace {

std::string VersionText(int64_t version) {
  return version < 0 ? std::string("(newest)") : absl::StrCat(version);
}

// What the load chose for a model's scheduling, and why, for the load log: its instances, its
// batching (the config's, or the backend's default where the config sets none), its token budget
// and the compute threads a CPU instance splits its batches over.
std::string SchedulingSummary(const ModelConfig& declared, const ModelConfig& config,
                              const ComputePool* pool) {
  std::string summary =
      absl::StrCat(config.instance_count, config.instance_count == 1 ? " instance" : " instances");
  if (config.max_batch_size > 0 && config.dynamic_batching.has_value()) {
    absl::StrAppend(
        &summary, ", dynamic batching up to ", config.max_batch_size, " (max_queue_delay ",
        config.dynamic_batching->max_queue_delay.count(), " us",
        declared.dynamic_batching.has_value() ? ", from its config" : ", the backend's default",
        ")");
  } else {
    absl::StrAppend(&summary, ", no dynamic batching (each request runs alone)");
  }
  if (config.ragged_batching.has_value()) {
    absl::StrAppend(&summary, ", at most ", config.ragged_batching->max_batch_tokens,
                    " tokens per batch");
  }
  if (pool != nullptr && config.instance_kind != InstanceKind::kGpu) {
    absl::StrAppend(&summary, "; on the CPU each batch is split over the compute pool's ",
                    pool->threads(), pool->threads() == 1 ? " thread" : " threads");
  }
  return summary;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(EngineOptions options) {
  if (options.clock == nullptr) return absl::InvalidArgumentError("EngineOptions.clock is null");
  if (options.default_max_queue_size < 1) {
    return absl::InvalidArgumentError("default max queue size must be >= 1");
  }
  if (options.executor_slots < 1 || options.gpu_executor_slots < 1) {
    return absl::InvalidArgumentError("executor slots must be >= 1");
  }
  if (options.stats_interval.count() < 0) {
    return absl::InvalidArgumentError("stats interval must be >= 0 ms");
  }
  if (!(options.access_log_sample_rate >= 0 && options.access_log_sample_rate <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "access log sample rate ", options.access_log_sample_rate, " is outside 0..1"));
  }
  constexpr int kMaxComputeThreads = 1024;
  if (options.compute_threads < 0 || options.compute_threads > kMaxComputeThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("compute threads must be in 0..", kMaxComputeThreads,
                     " (0: every usable CPU), not ", options.compute_threads));
  }
  std::unique_ptr<Engine> engine(new Engine(options));
  const CpuBudget cpus = UsableCpus();
  const int compute_threads = options.compute_threads > 0 ? options.compute_threads : cpus.cpus;
  engine->compute_ = std::make_shared<ComputePool>(compute_threads);
  LOG_INFO(options.logger, "CPU compute pool: ", compute_threads,
           compute_threads == 1 ? " thread" : " threads",
           options.compute_threads > 0 ? " (--compute-threads); the process may use "
                                       : ", one per CPU the process may use: ",
           cpus.Describe());
  ASSIGN_OR_RETURN(engine->preparation_,
                   PreparationPool::Create({.threads = options.preparation_threads,
                                            .max_queue = options.preparation_queue_size}));
  if (options.stats_interval.count() > 0) {
    Engine* raw = engine.get();
    ASSIGN_OR_RETURN(engine->collector_,
                     StatsCollector::Start({.interval = options.stats_interval},
                                           [raw](auto now) { raw->CollectStats(now); }));
  }
  return engine;
}

Engine::Engine(EngineOptions options) : options_(options) {}

Engine::~Engine() { Shutdown(); }

absl::StatusOr<std::shared_ptr<Engine::LoadedModel>> Engine::Build(const ModelSpec& given) {
  // Backends that read their inputs and outputs from their files complete the config first.
  ModelSpec spec = given;
  if (spec.compute_pool == nullptr) spec.compute_pool = compute_;
  ASSIGN_OR_RETURN(spec.config, CompleteModelConfig(given));
  RETURN_IF_ERROR(ValidateModelConfig(spec.config));
  RETURN_IF_ERROR(CheckLoadLimits(spec.config, spec.limits));  // before anything is allocated
  auto loaded = std::make_shared<LoadedModel>(
      ModelStatsOptions{.model_name = spec.config.name,
                        .model_version = spec.version,
                        .logger = options_.logger,
                        .access_log_sample_rate = options_.access_log_sample_rate,
                        .counts_tokens = spec.config.ragged_batching.has_value()});
  loaded->version = spec.version;
  ASSIGN_OR_RETURN(loaded->model, CreateModel(spec));
  const ModelConfig& config = loaded->config();
  loaded->resolved_parameters = loaded->model->ResolvedParameters();

  SchedulerOptions scheduler_options;
  scheduler_options.clock = options_.clock;
  // A queue size of 0 in a config means "the engine's default": never unbounded.
  auto queue_policy = [&](const QueuePolicyConfig& policy) {
    return QueuePolicy{.max_queue_size = policy.max_queue_size > 0
                                             ? policy.max_queue_size
                                             : options_.default_max_queue_size,
                       .default_timeout = policy.default_timeout,
                       .allow_timeout_override = policy.allow_timeout_override};
  };
  scheduler_options.queue_policy = queue_policy(config.queue_policy);
  if (config.priority_levels > 0) {
    scheduler_options.priority_levels = config.priority_levels;
    scheduler_options.default_priority_level = config.default_priority_level;
    for (const auto& [level, policy] : config.priority_queue_policy) {
      scheduler_options.level_policies[level] = queue_policy(policy);
    }
  }
  scheduler_options.policy.max_batch_size = config.max_batch_size;
  scheduler_options.policy.batching_enabled =
      config.max_batch_size > 0 && config.dynamic_batching.has_value();
  if (config.dynamic_batching.has_value()) {
    scheduler_options.policy.max_queue_delay = config.dynamic_batching->max_queue_delay;
    scheduler_options.policy.preferred_batch_sizes = config.dynamic_batching->preferred_batch_sizes;
  }
  if (config.ragged_batching.has_value()) {
    scheduler_options.policy.max_batch_tokens = config.ragged_batching->max_batch_tokens;
  }
  scheduler_options.stats = &loaded->stats;
  ASSIGN_OR_RETURN(loaded->scheduler, ModelScheduler::Create(config, scheduler_options));

  ModelScheduler* scheduler = loaded->scheduler.get();
  ExecutorFactoryOptions factory_options{
      .device = options_.device,
      .cpu_slots = options_.executor_slots,
      .gpu_slots = options_.gpu_executor_slots,
      .cpu_single_instance_on_batcher = options_.cpu_single_instance_on_batcher,
      .logger = options_.logger};
  factory_options.executor_options = [&](int slots, int i) {
    ExecutorOptions executor_options;
    executor_options.slot_count = slots;
    executor_options.stats = &loaded->stats;
    executor_options.on_slot_freed = [scheduler] { scheduler->NotifySlotFreed(); };
    // The executor's threads are joined (by the scheduler's Stop()) before `loaded` is freed, and
    // the engine stops every model before it goes, so both pointers outlive the callbacks.
    LoadedModel* raw = loaded.get();
    executor_options.on_fault = [this, raw, i](const absl::Status& fault) {
      OnExecutorFault(*raw, i, fault);
    };
    if (options_.before_batch_for_test) {
      executor_options.before_batch_for_test = [hook = options_.before_batch_for_test,
                                                name = config.name, version = spec.version,
                                                i] { return hook(name, version, i); };
    }
    return executor_options;
  };
  ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Executor>> executors,
                   CreateExecutors(spec, *loaded->model, factory_options));
  for (const auto& executor : executors) loaded->executors.push_back(executor.get());
  loaded->scheduler->Start(std::move(executors));
  const std::string model_summary = loaded->model->LoadSummary();
  LOG_INFO(options_.logger, "model '", config.name, "' version ", spec.version, ": ",
           SchedulingSummary(given.config, config, spec.compute_pool.get()),
           model_summary.empty() ? "" : "; ", model_summary);
  return loaded;
}

absl::Status Engine::LoadModel(ModelSpec spec) {
  const std::string name = spec.config.name;
  const int64_t version = spec.version;
  LOG_INFO(options_.logger, "loading model '", name, "' version ", version, " (backend ",
           spec.config.backend, ")");
  absl::StatusOr<std::shared_ptr<LoadedModel>> built = absl::UnknownError("not built");
  // Our code throws nothing, but the standard library does (std::bad_alloc, std::system_error
  // when a thread cannot start): one model's load must fail alone, never end the process.
  try {
    built = Build(spec);
  } catch (const std::exception& e) {
    built = LoadExceptionStatus(name, version, e);
  }
  std::shared_ptr<LoadedModel> replaced;
  if (!built.ok()) {
    versions_.RecordLoadFailure(name, version, std::string(built.status().message()));
  } else {
    replaced = versions_.Install(name, version, *std::move(built));
  }
  if (replaced != nullptr) replaced->scheduler->Stop();  // answers its queue, then frees it
  if (!built.ok()) {
    LOG_ERROR(options_.logger, "model '", name, "' version ", version,
              " failed to load: ", built.status().message());
    return built.status();
  }
  LOG_INFO(options_.logger, "model '", name, "' version ", version, " is READY");
  return absl::OkStatus();
}

void Engine::OnExecutorFault(LoadedModel& model, int instance, const absl::Status& fault) {
  const std::string& name = model.config().name;
  if (IsProcessFatal(fault)) {
    // The device context is gone for every model on it: this is not the instance's fault to
    // keep, but the process's, and the only recovery is a new process.
    if (process_fatal_.exchange(true)) return;  // logged and handled once
    BeginDrain();
    versions_.MarkFaulted(name, model,
                          absl::StrCat("instance ", instance,
                                       " hit a process-fatal device fault: ", fault.message()));
    LOG_ERROR(options_.logger, "process-fatal device fault in model '", name, "' version ",
              model.version, " instance ", instance, ": ", fault.message(),
              " (the device context is unusable; every model is failed and the process must be "
              "restarted)");
    const absl::Status refusal = absl::UnavailableError(
        absl::StrCat("the server's device failed and it is restarting: ", fault.message()));
    for (const auto& [other_name, loaded] : versions_.Select("", -1)) {
      loaded->scheduler->Fail(refusal);
    }
    if (options_.on_process_fatal) options_.on_process_fatal(fault);
    return;
  }
  const std::string reason =
      absl::StrCat("instance ", instance, " faulted: ", fault.message(), " (reload to recover)");
  // Another instance faulted first: its reason stands.
  if (!versions_.MarkFaulted(name, model, reason)) return;
  LOG_ERROR(options_.logger, "model '", name, "' version ", model.version,
            " is UNAVAILABLE: ", reason);
  // Its queue is answered now rather than left to wait for a reload.
  model.scheduler->Fail(absl::UnavailableError(
      absl::StrCat("model '", name, "' version ", model.version, " is not ready: ", reason)));
}

absl::Status Engine::UnloadModel(const std::string& name) {
  ASSIGN_OR_RETURN(ModelVersionTable::Versions versions, versions_.RemoveModel(name));
  if (versions.empty()) return absl::OkStatus();  // only failed loads were forgotten
  for (auto& [version, loaded] : versions) loaded->scheduler->Stop();
  LOG_INFO(options_.logger, "model '", name, "' unloaded");
  return absl::OkStatus();
}

absl::Status Engine::UnloadModelVersion(const std::string& name, int64_t version) {
  ASSIGN_OR_RETURN(std::shared_ptr<LoadedModel> loaded, versions_.RemoveVersion(name, version));
  loaded->scheduler->Stop();
  LOG_INFO(options_.logger, "model '", name, "' version ", version, " unloaded");
  return absl::OkStatus();
}

namespace {

// Counts one Submit() call from its entry to its return (Engine::submits_in_progress_).
class SubmitInProgress {
 public:
  explicit SubmitInProgress(std::atomic<int64_t>& count) : count_(count) {
    count_.fetch_add(1, std::memory_order_seq_cst);
  }
  ~SubmitInProgress() { count_.fetch_sub(1, std::memory_order_seq_cst); }
  SubmitInProgress(const SubmitInProgress&) = delete;
  SubmitInProgress& operator=(const SubmitInProgress&) = delete;

 private:
  std::atomic<int64_t>& count_;
};

}  // namespace

void Engine::Submit(std::unique_ptr<InferenceRequest> request) {
  const SubmitInProgress in_progress(submits_in_progress_);
  if (draining_.load(std::memory_order_seq_cst)) {
    request->Complete(absl::UnavailableError(
        process_fatal_.load(std::memory_order_acquire)
            ? "the server's device failed and it is restarting; not accepting requests"
            : "server is shutting down; not accepting requests"));
    return;
  }
  if (options_.during_submit_for_test) options_.during_submit_for_test();
  absl::StatusOr<std::shared_ptr<LoadedModel>> loaded =
      versions_.Resolve(request->model_name(), request->model_version(), /*faulted_ok=*/true);
  if (!loaded.ok()) {
    request->Complete(loaded.status());
    return;
  }
  LoadedModel& model = **loaded;
  absl::Status status = ValidateRequest(*model.model, *request);
  if (!status.ok()) {
    model.stats.RecordFailure(*request, status.code());
    request->Complete(std::move(status));
    return;
  }
  request->resolved_version = model.version;
  if (model.model->NeedsPreparation(*request)) {
    // Tokenization is not bounded enough for the RPC thread: the pool does it, then enqueues. The
    // job keeps the version alive (an unload meanwhile stops its scheduler, whose Enqueue then
    // answers UNAVAILABLE).
    auto holder = std::make_shared<std::unique_ptr<InferenceRequest>>(std::move(request));
    const auto submitted = std::chrono::steady_clock::now();
    PreparationPool::Job job = [this, loaded = *loaded, holder, submitted] {
      Prepare(*loaded, std::move(*holder), submitted);
    };
    if (absl::Status queued = preparation_->TrySubmit(job); !queued.ok()) {
      // Refused by the stage (its queue is full, or it stopped): a failure of both.
      model.stats.RecordPreparationFailure(std::chrono::steady_clock::now() - submitted);
      model.stats.RecordFailure(**holder, queued.code());
      (*holder)->Complete(std::move(queued));
    }
    return;
  }
  model.scheduler->Enqueue(std::move(request));
}

void Engine::Prepare(LoadedModel& model, std::unique_ptr<InferenceRequest> request,
                     std::chrono::steady_clock::time_point submitted) {
  // The stage's phases are timed on the steady clock, as the rest of the statistics; the
  // deadline is checked on the engine's clock, as the scheduler checks it.
  const auto started = std::chrono::steady_clock::now();
  absl::Status status;
  if (request->IsCancelled()) {
    status =
        absl::CancelledError("the client cancelled the request while it waited for tokenization");
  } else if (request->deadline.has_value() && options_.clock->Now() >= *request->deadline) {
    status = absl::DeadlineExceededError(
        "the request's deadline passed while it waited for tokenization");
  } else {
    status = model.model->PrepareRequest(*request);
  }
  const auto prepared = std::chrono::steady_clock::now();
  if (!status.ok()) {
    model.stats.RecordPreparationFailure(prepared - submitted);
    model.stats.RecordFailure(*request, status.code());
    request->Complete(std::move(status));
    return;
  }
  model.stats.RecordPreparation({.items = static_cast<uint64_t>(request->batch_size),
                                 .queue = started - submitted,
                                 .compute = prepared - started,
                                 .total = prepared - submitted});
  model.scheduler->Enqueue(std::move(request));
}

absl::StatusOr<Engine::ModelInfo> Engine::GetModel(const std::string& name, int64_t version) const {
  ASSIGN_OR_RETURN(std::shared_ptr<LoadedModel> loaded,
                   versions_.Resolve(name, version, /*faulted_ok=*/false));
  ModelInfo info;
  info.config = std::shared_ptr<const ModelConfig>(loaded, &loaded->config());
  info.resolved_parameters = loaded->resolved_parameters;
  info.version = loaded->version;
  info.ready_versions = versions_.ReadyVersions(name);
  return info;
}

bool Engine::IsModelReady(const std::string& name, int64_t version) const {
  return !draining() && versions_.Resolve(name, version, /*faulted_ok=*/false).ok();
}

void Engine::RecordModelFailure(const std::string& name, std::string reason) {
  versions_.RecordLoadFailure(name, ModelVersionTable::kWholeModel, std::move(reason));
}

std::vector<ModelVersionStatus> Engine::ListModels() const { return versions_.List(); }

absl::StatusOr<std::vector<Engine::VersionStats>> Engine::GetStats(const std::string& name,
                                                                   int64_t version) const {
  const std::vector<std::pair<std::string, std::shared_ptr<LoadedModel>>> selected =
      versions_.Select(name, version);
  if (!name.empty() && selected.empty()) {
    return absl::NotFoundError(
        absl::StrCat("model '", name, "' version ", VersionText(version), " is not loaded"));
  }
  std::vector<VersionStats> out;
  for (const auto& [model_name, loaded] : selected) {
    VersionStats entry{model_name, loaded->version, loaded->stats.Snapshot()};
    entry.stats.queue_depth = static_cast<uint64_t>(loaded->scheduler->QueueDepth());
    entry.stats.prepares = loaded->model->prepares_requests();
    entry.resolved_parameters = loaded->resolved_parameters;
    out.push_back(std::move(entry));
  }
  return out;
}

void Engine::CollectStats(std::chrono::steady_clock::time_point now) {
  // Outside the table's lock: reading a device counter waits for a copy. A version unloaded
  // meanwhile stays alive (and its stopped executors readable) through the shared pointer.
  for (const auto& [name, model] : versions_.Select("", -1)) {
    uint64_t items = 0;
    uint64_t tokens = 0;
    for (Executor* executor : model->executors) {
      items += executor->ReadItemCounter();
      tokens += executor->ReadTokenCounter();  // from the same read
    }
    model->stats.RecordDeviceItems(items, now, tokens);
  }
}

void Engine::BeginDrain() { draining_.store(true, std::memory_order_seq_cst); }

bool Engine::draining() const { return draining_.load(std::memory_order_acquire); }

bool Engine::WaitIdle(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    // In this order: a Submit's hand-off (to the pool or a queue) happens before its count drops,
    // and a pool job enqueues before the pool counts it done.
    bool idle = submits_in_progress_.load(std::memory_order_seq_cst) == 0;
    idle = idle && preparation_->Idle();
    for (const auto& [name, loaded] : versions_.Select("", -1)) {
      idle = idle && loaded->scheduler->Idle();
    }
    if (idle) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void Engine::Shutdown() {
  BeginDrain();
  if (collector_ != nullptr) collector_->Stop();  // it reads the models freed below
  // Before the schedulers stop: what the pool holds is prepared and enqueued, and answered there.
  if (preparation_ != nullptr) preparation_->Stop();
  for (auto& [name, versions] : versions_.RemoveAll()) {
    for (auto& [version, loaded] : versions) loaded->scheduler->Stop();
  }
}

}  // namespace sluice::engine
