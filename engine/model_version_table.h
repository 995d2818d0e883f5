#pragma once

// ModelVersionTable: which model versions are loaded, which faulted, and which failed to load
// (with the reason), and how a request's (name, version) resolves to one of them. The engine's
// lifecycle bookkeeping, apart from how a version is built (Engine::Build) and run
// (ModelScheduler): Engine installs a built version here, removes it on unload, and stops the
// schedulers this table hands back, always outside the table's lock.
//
// States: a version in the table is READY until its first executor fault (MarkFaulted), then
// UNAVAILABLE with that reason until it is replaced (a reload) or removed. A version whose load
// failed is UNAVAILABLE with the load error; if an older load of it is still installed, that
// load keeps serving and the failure only adds to its reason (ListModels).
//
// Thread-safe: every method takes the table's mutex for a few map operations only.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"
#include "engine/core/backend.h"
#include "engine/core/executor.h"
#include "engine/core/model_config.h"
#include "engine/core/model_stats.h"

namespace sluice::engine {

class ModelScheduler;

enum class ModelState { kLoading, kReady, kUnloading, kUnavailable };
absl::string_view ModelStateName(ModelState state);  // "LOADING", "READY", ...

struct ModelVersionStatus {
  std::string name;
  int64_t version = 0;
  ModelState state = ModelState::kUnavailable;
  // Why it is not ready (its load error, or the executor fault that took it down), or that a
  // reload failed while the previous load serves; empty otherwise.
  std::string reason;
};

// One loaded model version. Members are destroyed bottom-up: the scheduler (and its executors,
// which borrow the model's config and the stats) goes first. Shared: in-flight callers (Submit,
// the stats collector) keep a version alive after it left the table.
struct LoadedVersion {
  explicit LoadedVersion(ModelStatsOptions stats_options);
  ~LoadedVersion();

  int64_t version = 0;
  std::unique_ptr<Model> model;
  ModelStats stats;
  // The scheduler's executors, borrowed (it owns them): the stats collector reads their counters.
  std::vector<Executor*> executors;
  std::unique_ptr<ModelScheduler> scheduler;
  // What the load resolved (Model::ResolvedParameters: the encoder's `precision: auto` as the
  // precision it chose), read once by Engine::Build before the version is installed.
  std::map<std::string, std::string> resolved_parameters;

  const ModelConfig& config() const { return model->config(); }
};

class ModelVersionTable {
 public:
  using Versions = std::map<int64_t, std::shared_ptr<LoadedVersion>>;

  // Installs `loaded` as `name` version `version` (READY) and forgets that version's failed load;
  // returns the load it replaces (null if none), which the caller stops.
  std::shared_ptr<LoadedVersion> Install(const std::string& name, int64_t version,
                                         std::shared_ptr<LoadedVersion> loaded);
  // `version` kWholeModel in a failure: the model failed before any version could be built (its
  // config did not parse, its folder is missing). Version folders are numbered from 1.
  static constexpr int64_t kWholeModel = 0;

  // Records that loading `name` version `version` failed with `reason`. A whole-model failure
  // (kWholeModel) replaces every failure of `name`, and makes every version of it resolve to
  // UNAVAILABLE with that reason; a version's failure or install forgets the whole-model one.
  void RecordLoadFailure(const std::string& name, int64_t version, std::string reason);
  // Marks `loaded` (still installed as `name`) UNAVAILABLE with `reason`. Returns false if it had
  // already faulted (the first reason stands), true otherwise (also when it left the table).
  bool MarkFaulted(const std::string& name, const LoadedVersion& loaded, std::string reason);

  // Removes every version of `name` and its failed loads; returns the removed versions, which the
  // caller stops. NotFound if nothing of that name is installed or failed (an OK empty map when
  // only failures were forgotten).
  absl::StatusOr<Versions> RemoveModel(const std::string& name);
  // Removes one version (and its failed load). NotFound if that version is not installed.
  absl::StatusOr<std::shared_ptr<LoadedVersion>> RemoveVersion(const std::string& name,
                                                               int64_t version);
  // Removes everything; returns what was installed.
  std::map<std::string, Versions> RemoveAll();

  // The version that serves `version` (< 0: the newest that has not faulted). UNAVAILABLE for a
  // faulted version or a failed load (naming the reason) unless `faulted_ok`: then a faulted
  // version is returned (Submit's scheduler refuses the request and counts it). NotFound for an
  // unknown name or version.
  absl::StatusOr<std::shared_ptr<LoadedVersion>> Resolve(const std::string& name, int64_t version,
                                                         bool faulted_ok) const;
  // Versions of `name` that are installed and have not faulted, ascending.
  std::vector<int64_t> ReadyVersions(const std::string& name) const;
  // Every version known, installed or failed, sorted by name and version.
  std::vector<ModelVersionStatus> List() const;
  // Installed versions of `name` (empty: every model) and `version` (< 0: all), with their names.
  std::vector<std::pair<std::string, std::shared_ptr<LoadedVersion>>> Select(
      const std::string& name, int64_t version) const;

 private:
  struct Entry {
    std::shared_ptr<LoadedVersion> loaded;
    // The first executor fault; empty while READY.
    std::string fault;
  };

  // Why `version` of `name` (< 0: its newest failed version) failed to load, or the whole model's
  // failure; null if it did not.
  const std::string* LoadFailure(const std::string& name, int64_t version) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable common::Mutex mu_;
  // name -> version -> installed load.
  std::map<std::string, std::map<int64_t, Entry>> models_ ABSL_GUARDED_BY(mu_);
  // name -> version -> why its (last) load failed.
  std::map<std::string, std::map<int64_t, std::string>> failures_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::engine
