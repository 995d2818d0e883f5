#pragma once

// The Model / ModelInstance interface every backend implements. The engine owns the queue, the
// batcher, the executors and the stats; a backend only turns a gathered batch into outputs.

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/compute_pool.h"
#include "engine/core/executor.h"
#include "engine/core/inference_request.h"
#include "engine/core/load_limits.h"
#include "engine/core/model_config.h"
#include "engine/core/tensor.h"

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

  // Ragged models (sequence models, whose requests differ in length): true makes the executor
  // skip gathering and call RunRagged with the batch's requests as they are, instead of Run.
  virtual bool runs_ragged() const { return false; }
  // Runs the requests (inputs as bound by the model's request validation) as one batch. Returns,
  // per request, one tensor per config output in config order, each with the request's own
  // leading batch dimension; outputs the request did not ask for may be left empty (no name).
  // Errors as Run.
  virtual absl::StatusOr<std::vector<std::vector<Tensor>>> RunRagged(
      std::span<const InferenceRequest* const> requests);
};

// A loaded model version: its config and whatever the instances share (read-only weights).
// Thread-safe: CreateInstance may be called from any thread.
class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // `index` is the instance's number in [0, instance_count).
  virtual absl::StatusOr<std::unique_ptr<ModelInstance>> CreateInstance(int index) = 0;
  // What the load chose that the load log should name (the encoder's CPU precision), or empty.
  virtual std::string LoadSummary() const { return ""; }
  // Config parameters whose value the load resolved, each with the value that serves: the CPU
  // encoder's {"precision": "int8"} when its config said `auto` (or nothing: "fp32"), after any
  // fallback. Keys are parameters this backend accepts in a config, so that a config carrying
  // them loads again (pinned to that value). The engine hands them on beside the config
  // (Engine::GetModel: the server's ModelConfig shows them in place of the given values) and in
  // its stats (the server's sluice_model_info metric). Empty: the backend resolves none, and its
  // config is shown as given.
  virtual std::map<std::string, std::string> ResolvedParameters() const { return {}; }

  // Models whose inputs the generic binding (engine/request_validation.h) cannot describe
  // (optional inputs, a choice of data types, checks of the values) return true and bind requests
  // themselves in ValidateAndBindRequest. engine::ValidateRequest, the one entry point, always runs
  // the generic rules first (CheckRequestNames: inputs and requested outputs are the config's own
  // and appear once; RefuseDeviceInputs), then this hook instead of the generic binding. It runs on
  // the submitting thread before the request is queued: bounded, no blocking.
  virtual bool validates_requests() const { return false; }
  // Binds a request that passed the generic rules: checks data types, shapes and values, sets
  // batch_size (and token_count for sequence models). Errors as engine::ValidateRequest. Called
  // only when validates_requests().
  virtual absl::Status ValidateAndBindRequest(InferenceRequest& request) const;

  // Models whose requests may need work too heavy for the RPC thread before they can be batched
  // (the encoder's `text` inputs, tokenized into token ids): true when `request`, already
  // validated, needs PrepareRequest. Engine::Submit then hands it to the engine's bounded
  // preparation pool (engine/preparation_pool.h) instead of enqueuing it.
  virtual bool NeedsPreparation(const InferenceRequest& request) const { return false; }
  // Whether any request of this model may need preparation (the encoder with a tokenizer): its
  // statistics then report the preparation stage (ModelStatsSnapshot::prepares), also before the
  // first such request.
  virtual bool prepares_requests() const { return false; }
  // Runs on a preparation pool thread: turns the request's inputs into the ones the model runs
  // (the request owns them from then on, through its keepalive), in config order, and sets
  // token_count. An error answers the request (INVALID_ARGUMENT naming the batch item for bad
  // text). Thread-safe: called on several pool threads at once.
  virtual absl::Status PrepareRequest(InferenceRequest& request) const;
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
  // The process's CPU compute threads (the engine's, shared by every model), on which a CPU model
  // splits each batch's work. Null: the model computes on its executor's thread alone (tests and
  // benchmarks that build a model without an engine).
  std::shared_ptr<ComputePool> compute_pool;
};

// What a backend's GPU half receives to build the executor of one model instance on one GPU
// (engine/backend_registry.h, BackendRegistration::create_gpu_executor). All references are
// borrowed for the call; `model` (the loaded model version, already built by the backend's
// create_model) and `config` (its config) must outlive the executor, which keeps them.
struct GpuExecutorArgs {
  const ModelSpec& spec;
  const Model& model;
  const ModelConfig& config;
  // The CUDA device ordinal.
  int device = 0;
  // The engine's callbacks for this instance (slots, faults, stats, the test hook).
  ExecutorOptions options;
  // Nullable: receives a one-line load summary for the log (precision, buckets, memory).
  std::string* summary = nullptr;
};

// A backend's GPU half: the executor of one instance of the model on args.device, its weights
// uploaded, warmed up, every batch bucket's CUDA graph captured. Unimplemented when this model (its
// shapes, its parameters) has no GPU implementation: the engine then runs every instance of it on
// the CPU backend and logs why. Other errors fail the load (INTERNAL naming the CUDA call,
// RESOURCE_EXHAUSTED for device memory, InvalidArgument for a bad GPU parameter).
using GpuExecutorFactory =
    absl::StatusOr<std::unique_ptr<Executor>> (*)(const GpuExecutorArgs& args);

}  // namespace sluice::engine
