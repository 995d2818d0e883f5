#include "engine/cuda/cuda_backends.h"

#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "engine/cuda/cuda_executor.h"
#include "engine/cuda/cuda_model.h"

namespace sluice::engine::cuda {
namespace {

CudaExecutorOptions ExecutorOptionsFor(const GpuExecutorArgs& args) {
  CudaExecutorOptions options;
  options.executor = args.options;
  options.device = args.device;
  options.use_graphs = args.config.cuda_graphs;
  return options;
}

absl::StatusOr<std::unique_ptr<Executor>> FixedShapeExecutor(const GpuExecutorArgs& args,
                                                             CudaInstanceFactory create) {
  RETURN_IF_ERROR(CheckFixedShapes(args.spec.config));
  const std::vector<int> buckets = BatchBuckets(args.config);
  ASSIGN_OR_RETURN(std::unique_ptr<CudaModelInstance> instance,
                   create(args.spec, args.device, buckets));
  ASSIGN_OR_RETURN(
      std::unique_ptr<CudaExecutor> executor,
      CudaExecutor::Create(args.config, std::move(instance), ExecutorOptionsFor(args)));
  return std::unique_ptr<Executor>(std::move(executor));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Executor>> CreateSimpleGpuExecutor(const GpuExecutorArgs& args) {
  return FixedShapeExecutor(args, CreateCudaSimpleInstance);
}

absl::StatusOr<std::unique_ptr<Executor>> CreateIdentityGpuExecutor(const GpuExecutorArgs& args) {
  return FixedShapeExecutor(args, CreateCudaIdentityInstance);
}

absl::StatusOr<std::unique_ptr<Executor>> CreateMlpGpuExecutor(const GpuExecutorArgs& args) {
  return FixedShapeExecutor(args, CreateCudaMlpInstance);
}

absl::StatusOr<std::unique_ptr<Executor>> CreateEncoderGpuExecutor(const GpuExecutorArgs& args) {
  if (!args.config.ragged_batching.has_value()) {
    return absl::UnimplementedError(
        "the encoder runs on the GPU with ragged batching only (packed sequences)");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<CudaRaggedModel> ragged,
                   CreateCudaRaggedModel(args.model, args.device));
  ASSIGN_OR_RETURN(
      std::unique_ptr<CudaExecutor> executor,
      CudaExecutor::CreateRagged(args.config, std::move(ragged), ExecutorOptionsFor(args)));
  if (args.summary != nullptr) *args.summary = executor->ragged_summary();
  return std::unique_ptr<Executor>(std::move(executor));
}

}  // namespace sluice::engine::cuda
