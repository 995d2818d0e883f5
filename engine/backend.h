#pragma once

// The Model / ModelInstance interface every backend implements. The engine owns the queue, the
// batcher, the executors and the stats; a backend only turns a gathered batch into outputs.

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/load_limits.h"
#include "engine/model_config.h"
#include "engine/tensor.h"

namespace sluice::engine {

// One executable copy of a model (its weights, its scratch). Used by one executor thread at a
// time; different instances run concurrently.
class ModelInstance {
 public:
  virtual ~ModelInstance() = default;

  // Runs one batch. `inputs` holds one tensor per config input, in config order; with
  // max_batch_size > 0 their first dimension is the batch's item count, the same for all.
  // Returns one tensor per config output, in config order, with the same leading batch dimension.
  // Errors fail every request of the batch. INTERNAL means a fault of the backend: the executor
  // then treats the instance as broken and the model version is not ready until it is reloaded
  // (ExecutorOptions::on_fault); any other code fails only this batch.
  virtual absl::StatusOr<std::vector<Tensor>> Run(std::span<const TensorView> inputs) = 0;
};

// A loaded model version: its config and whatever the instances share (read-only weights).
// Thread-safe: CreateInstance may be called from any thread.
class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // `index` is the instance's number in [0, instance_count).
  virtual absl::StatusOr<std::unique_ptr<ModelInstance>> CreateInstance(int index) = 0;
};

// Where a model version lives and how it is configured.
struct ModelSpec {
  ModelConfig config;
  int64_t version = 1;
  // The version folder (`<repository>/<model>/<version>`), where backends find their files.
  std::string version_path;
  // What the load may allocate and start (checked by the engine before it builds anything, and by
  // backends that size buffers from their files). The defaults hold for embedders that set none.
  LoadLimits limits;
};

// Creates the model for `spec.config.backend`, after checking the config against what that
// backend supports. InvalidArgument names the model and the offending field; NotFound for an
// unknown backend (the message lists the known ones).
absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelSpec& spec);

// Backend names CreateModel knows, for messages and --help.
std::vector<std::string> KnownBackends();

}  // namespace sluice::engine
