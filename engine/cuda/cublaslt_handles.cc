#include "engine/cuda/cublaslt_handles.h"

#include "engine/cuda/cuda_check.h"

namespace sluice::engine::cuda {

absl::StatusOr<CublasLtHandle> CublasLtHandle::Create() {
  cublasLtHandle_t handle = nullptr;
  CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&handle));
  return CublasLtHandle(handle);
}

void CublasLtHandle::Deleter::operator()(cublasLtHandle_t handle) const {
  CUBLAS_LOG_IF_ERROR(cublasLtDestroy(handle));
}

absl::StatusOr<MatmulDesc> MatmulDesc::Create(cublasComputeType_t compute, cudaDataType_t scale) {
  cublasLtMatmulDesc_t desc = nullptr;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&desc, compute, scale));
  return MatmulDesc(desc);
}

absl::Status MatmulDesc::SetBytes(cublasLtMatmulDescAttributes_t attribute, const void* value,
                                  size_t size) {
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc_.get(), attribute, value, size));
  return absl::OkStatus();
}

void MatmulDesc::Deleter::operator()(cublasLtMatmulDesc_t desc) const {
  CUBLAS_LOG_IF_ERROR(cublasLtMatmulDescDestroy(desc));
}

absl::StatusOr<MatrixLayout> MatrixLayout::Create(cudaDataType_t type, uint64_t rows,
                                                  uint64_t columns, int64_t ld) {
  cublasLtMatrixLayout_t layout = nullptr;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&layout, type, rows, columns, ld));
  return MatrixLayout(layout);
}

void MatrixLayout::Deleter::operator()(cublasLtMatrixLayout_t layout) const {
  CUBLAS_LOG_IF_ERROR(cublasLtMatrixLayoutDestroy(layout));
}

absl::StatusOr<cublasLtMatmulAlgo_t> PickMatmulAlgo(cublasLtHandle_t handle, const MatmulDesc& desc,
                                                    const MatrixLayout& a, const MatrixLayout& b,
                                                    const MatrixLayout& d, size_t workspace_bytes) {
  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&preference));
  // Owned for this function only; a one-off, so a unique_ptr with a lambda deleter.
  std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                  void (*)(cublasLtMatmulPreference_t)>
      owner(preference, [](cublasLtMatmulPreference_t p) {
        CUBLAS_LOG_IF_ERROR(cublasLtMatmulPreferenceDestroy(p));
      });
  CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace_bytes, sizeof(workspace_bytes)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(
      handle, desc.get(), a.get(), b.get(), d.get(), d.get(), preference, 1, &result, &found));
  if (found == 0) {
    return absl::NotFoundError("cuBLASLt offers no algorithm for this GEMM and epilogue");
  }
  return result.algo;
}

}  // namespace sluice::engine::cuda
