#include "engine/cuda/cublaslt_handles.h"

#include "engine/cuda/cublaslt_algo.h"
#include "engine/cuda/cublaslt_api.h"
#include "engine/cuda/cuda_check.h"

namespace sluice::engine::cuda {

absl::StatusOr<CublasLtHandle> CublasLtHandle::Create() {
  absl::StatusOr<const CublasLtApi*> api = LoadCublasLt();
  if (!api.ok()) return api.status();
  cublasLtHandle_t handle = nullptr;
  CUBLAS_RETURN_IF_ERROR((*api)->Create(&handle));
  return CublasLtHandle(handle);
}

namespace {
// Every object below is created after a CublasLtHandle, so the library is loaded.
const CublasLtApi& Api() { return *LoadedCublasLt(); }
}  // namespace

cublasStatus_t CublasLtHandle::Matmul(cublasLtMatmulDesc_t desc, const void* alpha, const void* a,
                                      cublasLtMatrixLayout_t a_layout, const void* b,
                                      cublasLtMatrixLayout_t b_layout, const void* beta,
                                      const void* c, cublasLtMatrixLayout_t c_layout, void* d,
                                      cublasLtMatrixLayout_t d_layout,
                                      const cublasLtMatmulAlgo_t* algo, void* workspace,
                                      size_t workspace_bytes, cudaStream_t stream) const {
  return Api().Matmul(handle_.get(), desc, alpha, a, a_layout, b, b_layout, beta, c, c_layout, d,
                      d_layout, algo, workspace, workspace_bytes, stream);
}

void CublasLtHandle::Deleter::operator()(cublasLtHandle_t handle) const {
  CUBLAS_LOG_IF_ERROR(Api().Destroy(handle));
}

absl::StatusOr<MatmulDesc> MatmulDesc::Create(cublasComputeType_t compute, cudaDataType_t scale) {
  cublasLtMatmulDesc_t desc = nullptr;
  CUBLAS_RETURN_IF_ERROR(Api().MatmulDescCreate(&desc, compute, scale));
  return MatmulDesc(desc);
}

absl::Status MatmulDesc::SetBytes(cublasLtMatmulDescAttributes_t attribute, const void* value,
                                  size_t size) {
  CUBLAS_RETURN_IF_ERROR(Api().MatmulDescSetAttribute(desc_.get(), attribute, value, size));
  return absl::OkStatus();
}

void MatmulDesc::Deleter::operator()(cublasLtMatmulDesc_t desc) const {
  CUBLAS_LOG_IF_ERROR(Api().MatmulDescDestroy(desc));
}

absl::StatusOr<MatrixLayout> MatrixLayout::Create(cudaDataType_t type, uint64_t rows,
                                                  uint64_t columns, int64_t ld) {
  cublasLtMatrixLayout_t layout = nullptr;
  CUBLAS_RETURN_IF_ERROR(Api().MatrixLayoutCreate(&layout, type, rows, columns, ld));
  return MatrixLayout(layout);
}

void MatrixLayout::Deleter::operator()(cublasLtMatrixLayout_t layout) const {
  CUBLAS_LOG_IF_ERROR(Api().MatrixLayoutDestroy(layout));
}

absl::StatusOr<cublasLtMatmulAlgo_t> PickMatmulAlgo(cublasLtHandle_t handle, const MatmulDesc& desc,
                                                    const MatrixLayout& a, const MatrixLayout& b,
                                                    const MatrixLayout& d, size_t workspace_bytes) {
  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_RETURN_IF_ERROR(Api().MatmulPreferenceCreate(&preference));
  // Owned for this function only; a one-off, so a unique_ptr with a lambda deleter.
  std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                  void (*)(cublasLtMatmulPreference_t)>
      owner(preference, [](cublasLtMatmulPreference_t p) {
        CUBLAS_LOG_IF_ERROR(Api().MatmulPreferenceDestroy(p));
      });
  CUBLAS_RETURN_IF_ERROR(
      Api().MatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         &workspace_bytes, sizeof(workspace_bytes)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  // What the answer means (an algorithm, "nothing for this GEMM", or a failure) is decided in
  // one place, unit-tested with fake answers (cublaslt_algo.h).
  const cublasStatus_t call = Api().MatmulAlgoGetHeuristic(
      handle, desc.get(), a.get(), b.get(), d.get(), d.get(), preference, 1, &result, &found);
  return HeuristicAnswer(call, found, result);
}

}  // namespace sluice::engine::cuda
