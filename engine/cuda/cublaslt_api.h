#pragma once

// cuBLASLt, loaded with dlopen on first use instead of linked. Why: libcublasLt carries ~94 KB of
// thread-local storage; linked, it joins every thread's static TLS, and threads created with a
// small stack (civetweb's, in prometheus-cpp's metrics server: ~100 KB) then fail to start, in
// every process, GPU or not. Loaded only when a GPU model needs it, its TLS is allocated
// dynamically and nothing else changes.

#include <cublasLt.h>

#include "absl/status/statusor.h"

namespace sluice::engine::cuda {

// The cuBLASLt entry points sluice uses, resolved from libcublasLt.so.13.
struct CublasLtApi {
  decltype(&cublasLtCreate) Create;
  decltype(&cublasLtDestroy) Destroy;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&cublasLtMatmul) Matmul;
  decltype(&cublasLtGetStatusString) GetStatusString;
  decltype(&cublasLtGetStatusName) GetStatusName;
};

// Loads the library once (thread-safe) and returns its entry points, valid for the process's
// life. FailedPrecondition naming the library and dlerror() when it cannot be loaded.
absl::StatusOr<const CublasLtApi*> LoadCublasLt();

// The loaded API, or null if LoadCublasLt() has not succeeded (for error messages).
const CublasLtApi* LoadedCublasLt();

}  // namespace sluice::engine::cuda
