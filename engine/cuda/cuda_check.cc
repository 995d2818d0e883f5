#include "engine/cuda/cuda_check.h"

#include "engine/cuda/cublaslt_api.h"

namespace sluice::engine::cuda {

absl::Status CudaError(cudaError_t error, const char* expr, const char* file, int line) {
  const std::string message =
      absl::StrCat(expr, " failed at ", file, ":", line, ": ", cudaGetErrorString(error), " (",
                   cudaGetErrorName(error), ")");
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
