#include "engine/cuda/element_upload.h"

#include <algorithm>

#include "common/status_macros.h"
#include "engine/cuda/cuda_check.h"

namespace sluice::engine::cuda {

absl::StatusOr<DeviceBuffer> UploadAs(int device, const std::vector<float>& values,
                                      ElementType type, cudaStream_t stream) {
  const size_t count = std::max<size_t>(values.size(), 1);
  ASSIGN_OR_RETURN(DeviceBuffer result, DeviceBuffer::Create(device, count * ElementBytes(type)));
  if (values.empty()) return result;
  if (type == ElementType::kFp32) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(result.get(), values.data(), values.size() * 4,
                                         cudaMemcpyHostToDevice, stream));
  } else {
    ASSIGN_OR_RETURN(DeviceBuffer staging, DeviceBuffer::Create(device, values.size() * 4));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging.get(), values.data(), values.size() * 4,
                                         cudaMemcpyHostToDevice, stream));
    RETURN_IF_ERROR(LaunchConvertFromFloat(static_cast<const float*>(staging.get()), result.get(),
                                           type, static_cast<int64_t>(values.size()), stream));
    // `staging` is freed on return: the conversion must have run.
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return result;
  }
  // The host vector is pageable: the copy returned once it was staged; wait anyway so that every
  // upload has landed before the first batch.
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return result;
}

}  // namespace sluice::engine::cuda
