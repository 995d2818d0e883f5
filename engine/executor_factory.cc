#include "engine/executor_factory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/cpu/cpu_executor.h"
#include "engine/tensor.h"

// With the device probe in device.cc, the only code that knows whether this build has CUDA
// (STYLE rule 20): the engine facade links the CUDA executor's target only when it is built.
#if SLUICE_HAVE_CUDA
#include "engine/cuda/cuda_executor.h"
#include "engine/cuda/cuda_model.h"
#endif

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
  for (int i = 0; on_gpu && i < config.instance_count; ++i) {
    const int device =
        config.instance_gpus.empty() ? options.device.cuda_device : config.instance_gpus[i];
    std::string summary;
    absl::StatusOr<std::unique_ptr<Executor>> executor = CreateCudaExecutor(
        spec, model, config, device, options.executor_options(options.gpu_slots, i), &summary);
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

absl::StatusOr<std::unique_ptr<Executor>> CreateCudaExecutor(const ModelSpec& spec,
                                                             const Model& model,
                                                             const ModelConfig& config, int device,
                                                             ExecutorOptions options,
                                                             std::string* summary) {
#if SLUICE_HAVE_CUDA
  if (config.ragged_batching.has_value()) {
    // A sequence model (the encoder): packed tokens, (sequences, tokens) buckets.
    absl::StatusOr<std::unique_ptr<cuda::CudaRaggedModel>> ragged =
        cuda::CreateCudaRaggedModel(model, device);
    if (!ragged.ok()) return ragged.status();
    cuda::CudaExecutorOptions cuda_options;
    cuda_options.executor = std::move(options);
    cuda_options.device = device;
    cuda_options.use_graphs = config.cuda_graphs;
    absl::StatusOr<std::unique_ptr<cuda::CudaExecutor>> executor =
        cuda::CudaExecutor::CreateRagged(config, *std::move(ragged), std::move(cuda_options));
    if (!executor.ok()) return executor.status();
    if (summary != nullptr) *summary = (*executor)->ragged_summary();
    return std::unique_ptr<Executor>(*std::move(executor));
  }
  const std::vector<int> buckets = cuda::BatchBuckets(config);
  std::unique_ptr<cuda::CudaModelInstance> instance;
  {
    absl::StatusOr<std::unique_ptr<cuda::CudaModelInstance>> created =
        cuda::CreateCudaModelInstance(spec, device, buckets);
    if (!created.ok()) return created.status();
    instance = *std::move(created);
  }
  cuda::CudaExecutorOptions cuda_options;
  cuda_options.executor = std::move(options);
  cuda_options.device = device;
  cuda_options.use_graphs = config.cuda_graphs;
  absl::StatusOr<std::unique_ptr<cuda::CudaExecutor>> executor =
      cuda::CudaExecutor::Create(config, std::move(instance), std::move(cuda_options));
  if (!executor.ok()) return executor.status();
  return std::unique_ptr<Executor>(*std::move(executor));
#else
  return absl::UnimplementedError("this build has no CUDA support (SLUICE_ENABLE_CUDA=OFF)");
#endif
}

}  // namespace sluice::engine
