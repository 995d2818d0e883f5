#include "engine/cuda/cublaslt_algo.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_check.h"

namespace sluice::engine::cuda {

absl::StatusOr<cublasLtMatmulAlgo_t> HeuristicAnswer(
    cublasStatus_t call, int found, const cublasLtMatmulHeuristicResult_t& result) {
  if (call == CUBLAS_STATUS_NOT_SUPPORTED) {
    return absl::NotFoundError(
        "cuBLASLt's heuristic refuses this GEMM and epilogue (CUBLAS_STATUS_NOT_SUPPORTED)");
  }
  if (call != CUBLAS_STATUS_SUCCESS) {
    return CublasError(call, "cublasLtMatmulAlgoGetHeuristic(...)", __FILE__, __LINE__);
  }
  if (found == 0) {
    return absl::NotFoundError("cuBLASLt offers no algorithm for this GEMM and epilogue");
  }
  // A successful query still reports each result's own status; the algorithm is valid only
  // when that is CUBLAS_STATUS_SUCCESS (cublasLt.h, cublasLtMatmulAlgoGetHeuristic).
  if (result.state != CUBLAS_STATUS_SUCCESS) {
    return absl::NotFoundError(absl::StrCat("cuBLASLt's heuristic result for this GEMM is ",
                                            CublasStatusName(result.state)));
  }
  return result.algo;
}

bool NoMatmulAlgorithm(const absl::Status& status) {
  if (absl::IsNotFound(status)) return true;
  const std::optional<cublasStatus_t> code = CublasStatusOf(status);
  return code.has_value() && *code == CUBLAS_STATUS_NOT_SUPPORTED;
}

bool FallBackToPlainGemm(const absl::Status& picked, cublasLtEpilogue_t epilogue) {
  return !picked.ok() && epilogue != CUBLASLT_EPILOGUE_DEFAULT && NoMatmulAlgorithm(picked);
}

std::optional<cublasStatus_t> CublasStatusOf(const absl::Status& status) {
  // Abseil 20220623 answers an absl::optional, not a std::optional.
  const auto payload = status.GetPayload(kCublasStatusPayload);
  int code = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &code)) return std::nullopt;
  return static_cast<cublasStatus_t>(code);
}

const char* CublasStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_(unknown)";
}

}  // namespace sluice::engine::cuda
