#pragma once

// ModelRepository: the on-disk model repository (Triton's layout:
// `<root>/<model>/config.pbtxt` and `<root>/<model>/<version>/...`) and the lifecycle of the
// models in it: which versions to load (version_policy), loading them into the engine, unloading,
// and the index with each model's state and the reason for a failure.

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/log.h"
#include "common/mutex.h"
#include "engine/engine.h"
#include "proto/model_config.pb.h"

namespace sluice::server {

struct RepositoryOptions {
  // What each load may allocate and start, passed to the engine with every version
  // (--max-model-batch-size, --max-tensor-bytes, --max-batch-bytes, --max-model-instances,
  // --max-model-threads, --max-model-load-bytes). Default: engine::LoadLimits' defaults.
  engine::LoadLimits load_limits;
  // Largest config.pbtxt read, in bytes; a larger one (or one that is not a regular file: a FIFO,
  // a device such as /dev/zero) is that model's load error (--max-config-bytes). 1 MiB.
  int64_t max_config_bytes = int64_t{1} << 20;
  // Whether a model folder, its config.pbtxt, a version folder or a file directly in a version
  // folder (the weights) may be a symlink that resolves outside the repository
  // (--allow-symlinks-out-of-repository). Default false: such a version is refused. Symlinks
  // that stay inside the repository are always followed.
  bool allow_symlinks_out_of_repository = false;
  // Called after every Load, LoadListed entry and Unload (whatever its outcome), on the caller's
  // thread, outside the repository's locks: main re-announces readiness with it
  // (ServingState::ModelsChanged). Empty: nothing is called.
  std::function<void()> on_models_changed;
};

// Thread-safe. Load/Unload block until done (call them off RPC threads).
class ModelRepository {
 public:
  // `root` must be an existing directory (NotFound otherwise). `engine` and `logger` are borrowed
  // and must outlive the repository; `logger` may be null.
  static absl::StatusOr<std::unique_ptr<ModelRepository>> Create(const std::string& root,
                                                                 engine::Engine* engine,
                                                                 common::Logger* logger,
                                                                 RepositoryOptions options = {});

  // Names of the model folders in the repository (sorted): every sub-directory with a valid name.
  std::vector<std::string> ListModelNames() const;

  // Loads every model folder; a model that fails is recorded and logged, the others load.
  // Returns the names of those that failed, sorted.
  std::vector<std::string> LoadAll();

  // Loads each of `names` (--load-model), as Load does, except that a name with no folder in the
  // repository is recorded too: it is listed by Index() as UNAVAILABLE with the reason, counts
  // against AllModelsReady(), and requests for it answer UNAVAILABLE with the reason (Load, which
  // clients call, records nothing for a missing folder: a client cannot grow the records).
  // Returns the names of those that failed, in order.
  std::vector<std::string> LoadListed(const std::vector<std::string>& names);

  // (Re)loads `name` from disk: parses its config, picks versions by version_policy, loads each
  // into the engine; versions no longer selected are unloaded. InvalidArgument for a bad name,
  // NotFound for a missing folder, and the load error otherwise (also kept for Index()).
  absl::Status Load(const std::string& name);

  // Unloads every version of `name` (queued requests are answered first). NotFound if the model
  // is not loaded.
  absl::Status Unload(const std::string& name);

  struct IndexEntry {
    std::string name;
    std::string version;  // empty when the failure concerns the whole model (its config)
    std::string state;    // READY, UNAVAILABLE, LOADING, UNLOADING
    std::string reason;
  };
  // Every model in the repository folder and every model loaded, with its versions' states.
  std::vector<IndexEntry> Index(bool ready_only) const;

  // The entries of Index(false) for the models asked to load (Load, LoadAll, LoadListed) and not
  // unloaded since, failed ones included: what the per-model state gauge exports. A model folder
  // nobody asked to load is not listed.
  std::vector<IndexEntry> RequestedModelStates() const;

  // True when every model asked to load and not unloaded since is READY in every version it
  // selected (--strict-readiness): false while one loads for the first time, after its config
  // or a version failed to load, or while a version is faulted. True when none was asked.
  // A reload keeps the previous versions serving, so it does not make this false.
  bool AllModelsReady() const;

  // Longest model name (a file name on every file system sluice runs on).
  static constexpr size_t kMaxModelNameBytes = 255;

  // The config as it was last loaded (name filled in). NotFound if the model was never loaded.
  absl::StatusOr<inference::ModelConfig> GetConfig(const std::string& name) const;

  // Model names are single path components of [A-Za-z0-9_.-] (not "." or ".."), at most
  // kMaxModelNameBytes: no request can name a file outside the repository.
  static absl::Status ValidateModelName(const std::string& name);

  const std::string& root() const { return root_; }

 private:
  struct Record {
    std::optional<inference::ModelConfig> config;  // set once parsed successfully
    std::string error;                             // a whole-model failure (config, folders)
    std::vector<int64_t> versions;                 // versions handed to the engine
    bool unloaded = false;
    bool loading = false;
    bool unloading = false;
  };

  ModelRepository(std::string root, engine::Engine* engine, common::Logger* logger,
                  RepositoryOptions options);
  // OK if `path` resolves inside the repository (or symlinks out are allowed); InvalidArgument
  // naming the model and `what` otherwise.
  absl::Status CheckInside(const std::string& name, const std::filesystem::path& path,
                           absl::string_view what) const;
  // Reads and converts the config, and picks the versions. Fills `proto`.
  absl::StatusOr<std::vector<engine::ModelSpec>> Prepare(const std::string& name,
                                                         inference::ModelConfig& proto) const;
  // Load() without the on_models_changed call. `record_missing`: a missing folder is recorded as
  // the model's failure (LoadListed).
  absl::Status LoadOne(const std::string& name, bool record_missing);
  void NotifyModelsChanged() const;

  const std::string root_;
  const RepositoryOptions options_;
  engine::Engine* const engine_;
  common::Logger* const logger_;
  // Serializes Load/Unload so that two loads of one model never interleave; taken before mu_.
  common::Mutex lifecycle_mu_;
  mutable common::Mutex mu_ ABSL_ACQUIRED_AFTER(lifecycle_mu_);
  std::map<std::string, Record> records_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::server
