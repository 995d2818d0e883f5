#pragma once

// Move-only owners of cuBLASLt objects (STYLE rule 12): the library handle, a matmul descriptor,
// a matrix layout. Created by static Create() returning StatusOr; released in the destructor
// (errors there are logged, never thrown). Host-side objects: none of them touches a stream, so
// they may be built at load and used by any thread that enqueues with them.

#include <cublasLt.h>

#include <memory>
#include <type_traits>

#include "absl/status/statusor.h"

namespace sluice::engine::cuda {

class CublasLtHandle {
 public:
  // A handle for the current device (the caller holds a ScopedDevice for it). Loads cuBLASLt on
  // first use (cublaslt_api.h): FailedPrecondition if it cannot. Every other object here
  // REQUIRES a handle to have been created.
  static absl::StatusOr<CublasLtHandle> Create();
  // Runs one GEMM (cublasLtMatmul) with the loaded library.
  cublasStatus_t Matmul(cublasLtMatmulDesc_t desc, const void* alpha, const void* a,
                        cublasLtMatrixLayout_t a_layout, const void* b,
                        cublasLtMatrixLayout_t b_layout, const void* beta, const void* c,
                        cublasLtMatrixLayout_t c_layout, void* d, cublasLtMatrixLayout_t d_layout,
                        const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream) const;
  cublasLtHandle_t get() const { return handle_.get(); }

 private:
  struct Deleter {
    void operator()(cublasLtHandle_t handle) const;
  };
  explicit CublasLtHandle(cublasLtHandle_t handle) : handle_(handle) {}
  std::unique_ptr<std::remove_pointer_t<cublasLtHandle_t>, Deleter> handle_;
};

// What one GEMM computes: compute and scale types, transposes, the epilogue and its bias.
class MatmulDesc {
 public:
  static absl::StatusOr<MatmulDesc> Create(cublasComputeType_t compute, cudaDataType_t scale);
  cublasLtMatmulDesc_t get() const { return desc_.get(); }
  // cublasLtMatmulDescSetAttribute for a value of type T.
  template <typename T>
  absl::Status Set(cublasLtMatmulDescAttributes_t attribute, const T& value) {
    return SetBytes(attribute, &value, sizeof(T));
  }

 private:
  struct Deleter {
    void operator()(cublasLtMatmulDesc_t desc) const;
  };
  explicit MatmulDesc(cublasLtMatmulDesc_t desc) : desc_(desc) {}
  absl::Status SetBytes(cublasLtMatmulDescAttributes_t attribute, const void* value, size_t size);
  std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>, Deleter> desc_;
};

// A column-major `rows` x `columns` matrix of `type` with leading dimension `ld`.
class MatrixLayout {
 public:
  static absl::StatusOr<MatrixLayout> Create(cudaDataType_t type, uint64_t rows, uint64_t columns,
                                             int64_t ld);
  cublasLtMatrixLayout_t get() const { return layout_.get(); }

 private:
  struct Deleter {
    void operator()(cublasLtMatrixLayout_t layout) const;
  };
  explicit MatrixLayout(cublasLtMatrixLayout_t layout) : layout_(layout) {}
  std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>, Deleter> layout_;
};

// The best algorithm cuBLASLt's heuristic offers for `desc` over these layouts within
// `workspace_bytes` (A = weights, B = activations, C = D = output). NotFound if it has none,
// including a heuristic that refuses the combination (CUBLAS_STATUS_NOT_SUPPORTED):
// cublaslt_algo.h HeuristicAnswer.
absl::StatusOr<cublasLtMatmulAlgo_t> PickMatmulAlgo(cublasLtHandle_t handle, const MatmulDesc& desc,
                                                    const MatrixLayout& a, const MatrixLayout& b,
                                                    const MatrixLayout& d, size_t workspace_bytes);

}  // namespace sluice::engine::cuda
