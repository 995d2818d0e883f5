#include "engine/cuda/device_info.h"

#include <cuda_runtime_api.h>

#include "common/status_macros.h"
#include "engine/cuda/cuda_check.h"

namespace sluice::engine::cuda {

absl::StatusOr<std::vector<DeviceInfo>> ListDevices() {
  int count = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp props{};
    CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&props, i));
    devices.push_back({i, props.name, props.major, props.minor, props.totalGlobalMem});
  }
  if (devices.empty()) return absl::NotFoundError("cudaGetDeviceCount found no CUDA device");
  return devices;
}

}  // namespace sluice::engine::cuda
