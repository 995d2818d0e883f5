#include "engine/cuda/cuda_check.h"

#include "engine/cuda/cublaslt_api.h"
#include "engine/device_fault.h"

namespace sluice::engine::cuda {

// The table in engine/device_fault.cc numbers the codes without the CUDA headers; these are the
// codes every supported toolkit (12.x, 13.x) has.
static_assert(cudaErrorECCUncorrectable == 214 && cudaErrorIllegalAddress == 700 &&
                  cudaErrorLaunchTimeout == 702 && cudaErrorAssert == 710 &&
                  cudaErrorHardwareStackError == 714 && cudaErrorIllegalInstruction == 715 &&
                  cudaErrorMisalignedAddress == 716 && cudaErrorInvalidAddressSpace == 717 &&
                  cudaErrorInvalidPc == 718 && cudaErrorLaunchFailure == 719 &&
                  cudaErrorMemoryAllocation == 2 && cudaErrorInvalidConfiguration == 9 &&
                  cudaErrorLaunchOutOfResources == 701 && cudaErrorInvalidValue == 1,
              "CUDA error numbers differ from engine/device_fault.cc's table");

absl::Status CudaError(cudaError_t error, const char* expr, const char* file, int line) {
  const std::string message =
      absl::StrCat(expr, " failed at ", file, ":", line, ": ", cudaGetErrorString(error), " (",
                   cudaGetErrorName(error), ")");
  if (IsStickyCudaError(static_cast<int>(error))) {
    // Nothing clears it: the context is unusable and the process must exit (device_fault.h).
    return MarkProcessFatal(absl::InternalError(message));
  }
  // A recoverable error is also the thread's "last error" until read: read (and so clear) it
  // here, so that the next launch's cudaGetLastError() check does not blame itself for this one.
  (void)cudaGetLastError();
  if (error == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

absl::Status CublasError(cublasStatus_t status, const char* expr, const char* file, int line) {
  // The library is loaded lazily (cublaslt_api.h); a status can only come from a loaded one.
  const CublasLtApi* api = LoadedCublasLt();
  const std::string message =
      api == nullptr
          ? absl::StrCat(expr, " failed at ", file, ":", line, ": cuBLAS status ",
                         static_cast<int>(status))
          : absl::StrCat(expr, " failed at ", file, ":", line, ": ", api->GetStatusString(status),
                         " (", api->GetStatusName(status), ")");
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

}  // namespace sluice::engine::cuda
