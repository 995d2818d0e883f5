#include "engine/cuda/cuda_check.h"

namespace sluice::engine::cuda {

absl::Status CudaError(cudaError_t error, const char* expr, const char* file, int line) {
  const std::string message =
      absl::StrCat(expr, " failed at ", file, ":", line, ": ", cudaGetErrorString(error), " (",
                   cudaGetErrorName(error), ")");
  if (error == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

absl::Status CublasError(cublasStatus_t status, const char* expr, const char* file, int line) {
  const std::string message =
      absl::StrCat(expr, " failed at ", file, ":", line, ": ", cublasLtGetStatusString(status),
                   " (", cublasLtGetStatusName(status), ")");
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

}  // namespace sluice::engine::cuda
