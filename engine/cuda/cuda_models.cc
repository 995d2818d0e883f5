// `simple` and `identity` on the GPU.

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/kernels/add_sub.cuh"
#include "engine/models/identity_model.h"

namespace sluice::engine::cuda {

namespace {

// OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 over int32, as engine/models/simple_model.
class CudaSimpleInstance final : public CudaModelInstance {
 public:
  explicit CudaSimpleInstance(int64_t elements_per_row) : elements_per_row_(elements_per_row) {}
  absl::Status Enqueue(cudaStream_t stream, std::span<const void* const> inputs,
                       std::span<void* const> outputs, int rows) override {
    return LaunchAddSubInt32(static_cast<const int32_t*>(inputs[0]),
                             static_cast<const int32_t*>(inputs[1]),
                             static_cast<int32_t*>(outputs[0]), static_cast<int32_t*>(outputs[1]),
                             elements_per_row_ * rows, stream);
  }
  bool counts_non_finite() const override { return false; }

 private:
  const int64_t elements_per_row_;
};

// Every output is a device-to-device copy of the input of the same index.
class CudaIdentityInstance final : public CudaModelInstance {
 public:
  CudaIdentityInstance(std::vector<size_t> row_bytes, bool fp32)
      : row_bytes_(std::move(row_bytes)), fp32_(fp32) {}
  absl::Status Enqueue(cudaStream_t stream, std::span<const void* const> inputs,
                       std::span<void* const> outputs, int rows) override {
    for (size_t i = 0; i < outputs.size(); ++i) {
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(outputs[i], inputs[i], row_bytes_[i] * rows,
                                           cudaMemcpyDeviceToDevice, stream));
    }
    return absl::OkStatus();
  }
  bool counts_non_finite() const override { return fp32_; }

 private:
  const std::vector<size_t> row_bytes_;
  const bool fp32_;
};

}  // namespace

absl::StatusOr<size_t> FixedItemBytes(const TensorSpec& tensor) {
  if (tensor.dtype == DataType::kBytes) {
    return absl::UnimplementedError(
        absl::StrCat("tensor '", tensor.name, "' is BYTES, which the CUDA backend does not run"));
  }
  for (int64_t dim : tensor.dims) {
    if (dim < 0) {
      return absl::UnimplementedError(absl::StrCat("tensor '", tensor.name, "' has dims ",
                                                   ShapeToString(tensor.dims),
                                                   "; the CUDA backend needs fixed dims"));
    }
  }
  ASSIGN_OR_RETURN(int64_t elements, ElementCount(tensor.dims));
  ASSIGN_OR_RETURN(size_t bytes, FixedByteSize(tensor.dtype, elements));
  return bytes;
}

absl::Status CheckFixedShapes(const ModelConfig& config) {
  for (const auto* tensors : {&config.inputs, &config.outputs}) {
    for (const TensorSpec& tensor : *tensors) RETURN_IF_ERROR(FixedItemBytes(tensor).status());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudaModelInstance>> CreateCudaSimpleInstance(
    const ModelSpec& spec, int /*device*/, std::span<const int> /*buckets*/) {
  const ModelConfig& config = spec.config;
  // The CPU backend's CreateModel checked the shape: two INT32 inputs and outputs of one size.
  if (config.inputs.size() != 2 || config.outputs.size() != 2 ||
      config.inputs[0].dtype != DataType::kInt32) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", config.name, "': simple needs 2 INT32 inputs and 2 outputs"));
  }
  ASSIGN_OR_RETURN(int64_t elements, ElementCount(config.inputs[0].dims));
  return std::unique_ptr<CudaModelInstance>(new CudaSimpleInstance(elements));
}

absl::StatusOr<std::unique_ptr<CudaModelInstance>> CreateCudaIdentityInstance(
    const ModelSpec& spec, int /*device*/, std::span<const int> /*buckets*/) {
  const ModelConfig& config = spec.config;
  if (config.parameters.count(models::kExecuteDelayMsParam) > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", config.name, "': identity's ", models::kExecuteDelayMsParam,
                     " is honoured by the CPU backend only; set instance_group kind: KIND_CPU"));
  }
  std::vector<size_t> row_bytes;
  for (const TensorSpec& input : config.inputs) {
    ASSIGN_OR_RETURN(size_t bytes, FixedItemBytes(input));
    row_bytes.push_back(bytes);
  }
  if (config.outputs.size() > config.inputs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", config.name, "': identity has more outputs than inputs"));
  }
  row_bytes.resize(config.outputs.size());
  const bool fp32 = config.outputs[0].dtype == DataType::kFp32;
  return std::unique_ptr<CudaModelInstance>(new CudaIdentityInstance(std::move(row_bytes), fp32));
}

}  // namespace sluice::engine::cuda
