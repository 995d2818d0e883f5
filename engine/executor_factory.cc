#include "engine/executor_factory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/backend_registry.h"
#include "engine/core/tensor.h"
#include "engine/cpu/cpu_executor.h"

namespace sluice::engine {
namespace {

// Runs every instance once on zeros (batch 1 and max_batch_size) so that a model is READY only
// after it has computed; models with variable dims are not warmed up (no shape to invent).
absl::Status WarmUp(const ModelConfig& config, ModelInstance& instance) {
  for (const TensorSpec& input : config.inputs) {
    if (input.dtype == DataType::kBytes) return absl::OkStatus();
    for (int64_t dim : input.dims) {
      if (dim < 0) return absl::OkStatus();
    }
  }
  std::vector<int> batch_sizes = {0};
  if (config.max_batch_size > 0) {
    batch_sizes = {1};
    if (config.max_batch_size > 1) batch_sizes.push_back(config.max_batch_size);
  }
  for (int batch : batch_sizes) {
    std::vector<std::vector<std::byte>> buffers(config.inputs.size());
    std::vector<TensorView> views(config.inputs.size());
    for (size_t i = 0; i < config.inputs.size(); ++i) {
      const TensorSpec& spec = config.inputs[i];
      Shape shape = spec.dims;
      if (batch > 0) shape.insert(shape.begin(), batch);
      ASSIGN_OR_RETURN(int64_t elements, ElementCount(shape));
      ASSIGN_OR_RETURN(size_t bytes, FixedByteSize(spec.dtype, elements));
      buffers[i].assign(bytes, std::byte{0});
      views[i] = TensorView{spec.name, spec.dtype, shape, buffers[i]};
    }
    absl::StatusOr<std::vector<Tensor>> outputs = instance.Run(views);
    if (!outputs.ok()) {
      return absl::Status(
          outputs.status().code(),
          absl::StrCat("warm-up at batch size ", batch, " failed: ", outputs.status().message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Executor>>> CreateExecutors(
    const ModelSpec& spec, Model& model, const ExecutorFactoryOptions& options) {
  const ModelConfig& config = model.config();
  std::vector<std::unique_ptr<Executor>> executors;
  bool on_gpu = options.device.kind == DeviceSelection::Kind::kCuda &&
                config.instance_kind != InstanceKind::kCpu;
  ASSIGN_OR_RETURN(const BackendRegistration* backend, FindBackend(config.name, config.backend));
  if (on_gpu && backend->create_gpu_executor == nullptr) {
    LOG_INFO(options.logger, "model '", config.name, "' runs on the CPU backend: backend '",
             config.backend, "' has no GPU implementation in this build");
    on_gpu = false;
  }
  for (int i = 0; on_gpu && i < config.instance_count; ++i) {
    std::string summary;
    const GpuExecutorArgs args{.spec = spec,
                               .model = model,
                               .config = config,
                               .device = config.instance_gpus.empty() ? options.device.cuda_device
                                                                      : config.instance_gpus[i],
                               .options = options.executor_options(options.gpu_slots, i),
                               .summary = &summary};
    absl::StatusOr<std::unique_ptr<Executor>> executor = backend->create_gpu_executor(args);
    if (absl::IsUnimplemented(executor.status())) {
      // No GPU implementation for this model: all its instances run on the CPU backend.
      LOG_INFO(options.logger, "model '", config.name,
               "' runs on the CPU backend: ", executor.status().message());
      on_gpu = false;
      executors.clear();
      break;
    }
    if (!executor.ok()) return executor.status();
    if (!summary.empty()) {
      LOG_INFO(options.logger, "model '", config.name, "' instance ", i, ": ", summary);
    }
    executors.push_back(*std::move(executor));
  }
  const cpu::CpuExecutorOptions cpu_options{
      .run_on_caller = options.cpu_single_instance_on_batcher && config.instance_count == 1};
  for (int i = 0; !on_gpu && i < config.instance_count; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<ModelInstance> instance, model.CreateInstance(i));
    RETURN_IF_ERROR(WarmUp(config, *instance));
    ASSIGN_OR_RETURN(
        std::unique_ptr<cpu::CpuExecutor> executor,
        cpu::CpuExecutor::Create(config, std::move(instance),
                                 options.executor_options(options.cpu_slots, i), cpu_options));
    executors.push_back(std::move(executor));
  }
  return executors;
}

}  // namespace sluice::engine
