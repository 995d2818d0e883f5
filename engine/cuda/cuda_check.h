#pragma once

// Error checking for every CUDA runtime and cuBLAS call (STYLE rule 11): one generic macro keeps
// the failing expression, file and line; the specific ones only say how to read the error code.
// Destructors cannot return a status: they use CUDA_LOG_IF_ERROR and carry on.

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sluice::engine::cuda {

// INTERNAL status naming the call, e.g. "cudaMalloc(&p, n) failed at engine/cuda/x.cc:12:
// out of memory (cudaErrorMemoryAllocation)". Out-of-memory maps to RESOURCE_EXHAUSTED (STYLE 8).
// A sticky error (engine/core/device_fault.h: the context is unusable) is marked process-fatal
// (MarkProcessFatal); a recoverable one is cleared from the thread's last-error state, so that
// it is not reported again by the next launch's cudaGetLastError().
absl::Status CudaError(cudaError_t error, const char* expr, const char* file, int line);
// The same for a cuBLAS / cuBLASLt status; CUBLAS_STATUS_ALLOC_FAILED maps to RESOURCE_EXHAUSTED,
// the code is recorded in the status (cublaslt_algo.h CublasStatusOf). A cuBLAS call can be the
// first to meet a device fault an earlier kernel left (cublasLtMatmul after an illegal address):
// its status then only says EXECUTION_FAILED or INTERNAL_ERROR, so the context itself is asked
// (CublasErrorInContext), and a sticky state is marked process-fatal as CudaError marks it.
absl::Status CublasError(cublasStatus_t status, const char* expr, const char* file, int line);
// CublasError with the context's state given: `context_state` is what a CUDA call on the failing
// thread's context answered just after (cudaSuccess: healthy). Separate so that tests can feed
// fake codes without a device.
absl::Status CublasErrorInContext(cublasStatus_t status, cudaError_t context_state,
                                  const char* expr, const char* file, int line);

}  // namespace sluice::engine::cuda

#define SLUICE_GPU_RETURN_IF_ERROR_GEN_(expr, success, to_status)      \
  do {                                                                 \
    auto sluice_gpu_result_ = (expr);                                  \
    if (sluice_gpu_result_ != (success)) {                             \
      return to_status(sluice_gpu_result_, #expr, __FILE__, __LINE__); \
    }                                                                  \
  } while (false)

#define CUDA_RETURN_IF_ERROR(expr) \
  SLUICE_GPU_RETURN_IF_ERROR_GEN_(expr, cudaSuccess, ::sluice::engine::cuda::CudaError)

#define CUBLAS_RETURN_IF_ERROR(expr) \
  SLUICE_GPU_RETURN_IF_ERROR_GEN_(expr, CUBLAS_STATUS_SUCCESS, ::sluice::engine::cuda::CublasError)

#define CUBLAS_LOG_IF_ERROR(expr)                                                               \
  do {                                                                                          \
    cublasStatus_t sluice_cublas_status_ = (expr);                                              \
    if (sluice_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                       \
      std::fprintf(                                                                             \
          stderr, "%s\n",                                                                       \
          ::sluice::engine::cuda::CublasError(sluice_cublas_status_, #expr, __FILE__, __LINE__) \
              .ToString()                                                                       \
              .c_str());                                                                        \
    }                                                                                           \
  } while (false)

#define CUDA_LOG_IF_ERROR(expr)                                                            \
  do {                                                                                     \
    cudaError_t sluice_cuda_error_ = (expr);                                               \
    if (sluice_cuda_error_ != cudaSuccess) {                                               \
      std::fprintf(                                                                        \
          stderr, "%s\n",                                                                  \
          ::sluice::engine::cuda::CudaError(sluice_cuda_error_, #expr, __FILE__, __LINE__) \
              .ToString()                                                                  \
              .c_str());                                                                   \
    }                                                                                      \
  } while (false)
