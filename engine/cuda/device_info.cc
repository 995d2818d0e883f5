#include "engine/cuda/device_info.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/cuda/cuda_check.h"

namespace sluice::engine::cuda {
namespace {

// Whether the NVIDIA kernel driver is loaded (it creates /dev/nvidiactl). Without it an
// "insufficient driver" answer means no GPU at all, not a driver too old for a GPU that is there.
bool NvidiaDriverLoaded() { return access("/dev/nvidiactl", F_OK) == 0; }

}  // namespace

absl::StatusOr<std::vector<DeviceInfo>> ListDevices() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaErrorNoDevice ||
      (error == cudaErrorInsufficientDriver && !NvidiaDriverLoaded())) {
    // The ordinary state of a machine without a GPU: NotFound, with CUDA's words kept for whoever
    // asked for a GPU explicitly. Nothing sticky to clear beyond the thread's last error.
    cudaGetLastError();
    return absl::NotFoundError(
        absl::StrCat("no GPU found (cudaGetDeviceCount: ", cudaGetErrorString(error), ")"));
  }
  if (error != cudaSuccess) {
    return CudaError(error, "cudaGetDeviceCount(&count)", __FILE__, __LINE__);
  }
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp props{};
    CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&props, i));
    devices.push_back({i, props.name, props.major, props.minor, props.totalGlobalMem});
  }
  if (devices.empty()) return absl::NotFoundError("no GPU found (cudaGetDeviceCount found none)");
  return devices;
}

}  // namespace sluice::engine::cuda
