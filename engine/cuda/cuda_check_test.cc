// The CUDA / cuBLAS error mapping and the cuBLASLt algorithm choice, fed fake status codes: no
// device is touched, so these run (and must pass) on machines without a GPU.

#include "engine/cuda/cuda_check.h"

#include "engine/core/device_fault.h"
#include "engine/cuda/cublaslt_algo.h"
#include "gtest/gtest.h"

namespace sluice::engine::cuda {
namespace {

TEST(CudaErrorTest, AStickyErrorIsLatchedProcessFatal) {
  const absl::Status status = CudaError(cudaErrorIllegalAddress, "kernel<<<>>>", "x.cc", 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(IsProcessFatal(status)) << status;
  EXPECT_NE(status.message().find("cudaErrorIllegalAddress"), std::string::npos) << status;
  EXPECT_NE(status.message().find("x.cc:1"), std::string::npos) << status;
}

TEST(CudaErrorTest, ARecoverableErrorIsNotProcessFatal) {
  const absl::Status status = CudaError(cudaErrorLaunchOutOfResources, "kernel", "x.cc", 2);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(IsProcessFatal(status)) << status;
  const absl::Status oom = CudaError(cudaErrorMemoryAllocation, "cudaMalloc", "x.cc", 3);
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(IsProcessFatal(oom));
}

TEST(CublasErrorTest, AStickyContextBehindACublasFailureIsLatchedProcessFatal) {
  // cublasLtMatmul is the first call to see that an earlier kernel faulted: the cuBLAS status
  // alone says EXECUTION_FAILED, the context says the error is sticky.
  const absl::Status status = CublasErrorInContext(
      CUBLAS_STATUS_EXECUTION_FAILED, cudaErrorIllegalAddress, "cublasLtMatmul(...)", "y.cc", 4);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(IsProcessFatal(status)) << status;
  EXPECT_NE(status.message().find("CUBLAS_STATUS_EXECUTION_FAILED"), std::string::npos) << status;
  EXPECT_NE(status.message().find("cudaErrorIllegalAddress"), std::string::npos) << status;
  // Every sticky code of the table, whatever cuBLAS answered.
  for (cudaError_t sticky : {cudaErrorLaunchFailure, cudaErrorECCUncorrectable, cudaErrorAssert,
                             cudaErrorIllegalInstruction, cudaErrorMisalignedAddress}) {
    EXPECT_TRUE(IsProcessFatal(
        CublasErrorInContext(CUBLAS_STATUS_INTERNAL_ERROR, sticky, "cublasLtMatmul", "y.cc", 5)))
        << cudaGetErrorName(sticky);
  }
}

TEST(CublasErrorTest, AHealthyContextKeepsTheFailureRecoverable) {
  const absl::Status failed = CublasErrorInContext(CUBLAS_STATUS_EXECUTION_FAILED, cudaSuccess,
                                                   "cublasLtMatmul", "y.cc", 6);
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(IsProcessFatal(failed));
  // A recoverable runtime error seen beside it does not make it fatal either.
  EXPECT_FALSE(IsProcessFatal(CublasErrorInContext(
      CUBLAS_STATUS_EXECUTION_FAILED, cudaErrorLaunchOutOfResources, "cublasLtMatmul", "y.cc", 7)));
  const absl::Status oom =
      CublasErrorInContext(CUBLAS_STATUS_ALLOC_FAILED, cudaSuccess, "cublasLtCreate", "y.cc", 8);
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CublasStatusOf(oom), CUBLAS_STATUS_ALLOC_FAILED);
}

cublasLtMatmulHeuristicResult_t Result(cublasStatus_t state) {
  cublasLtMatmulHeuristicResult_t result{};
  result.state = state;
  result.algo.data[0] = 42;
  return result;
}

TEST(GemmFallbackTest, NotSupportedFromTheHeuristicChoosesThePlainGemm) {
  const absl::StatusOr<cublasLtMatmulAlgo_t> answer =
      HeuristicAnswer(CUBLAS_STATUS_NOT_SUPPORTED, 0, Result(CUBLAS_STATUS_SUCCESS));
  ASSERT_FALSE(answer.ok());
  EXPECT_TRUE(absl::IsNotFound(answer.status())) << answer.status();
  EXPECT_NE(answer.status().message().find("CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos);
  // The MLP's and the encoder's fused epilogues fall back; a plain GEMM has nothing to fall to.
  EXPECT_TRUE(FallBackToPlainGemm(answer.status(), CUBLASLT_EPILOGUE_GELU_BIAS));
  EXPECT_TRUE(FallBackToPlainGemm(answer.status(), CUBLASLT_EPILOGUE_RELU_BIAS));
  EXPECT_TRUE(FallBackToPlainGemm(answer.status(), CUBLASLT_EPILOGUE_BIAS));
  EXPECT_FALSE(FallBackToPlainGemm(answer.status(), CUBLASLT_EPILOGUE_DEFAULT));
}

TEST(GemmFallbackTest, NoResultOrAResultNotSupportedChoosesThePlainGemm) {
  const auto none = HeuristicAnswer(CUBLAS_STATUS_SUCCESS, 0, Result(CUBLAS_STATUS_SUCCESS));
  EXPECT_TRUE(FallBackToPlainGemm(none.status(), CUBLASLT_EPILOGUE_GELU_BIAS)) << none.status();
  const auto refused =
      HeuristicAnswer(CUBLAS_STATUS_SUCCESS, 1, Result(CUBLAS_STATUS_NOT_SUPPORTED));
  EXPECT_TRUE(FallBackToPlainGemm(refused.status(), CUBLASLT_EPILOGUE_GELU_BIAS))
      << refused.status();
}

TEST(GemmFallbackTest, NotSupportedFromAnotherCublasCallAlsoFallsBack) {
  // E.g. setting an epilogue attribute this cuBLASLt version does not have.
  const absl::Status status = CublasErrorInContext(CUBLAS_STATUS_NOT_SUPPORTED, cudaSuccess,
                                                   "cublasLtMatmulDescSetAttribute", "z.cc", 9);
  EXPECT_TRUE(NoMatmulAlgorithm(status)) << status;
  EXPECT_TRUE(FallBackToPlainGemm(status, CUBLASLT_EPILOGUE_GELU_BIAS));
}

TEST(GemmFallbackTest, ARealFailureIsNotAFallback) {
  const absl::Status failed = CublasErrorInContext(CUBLAS_STATUS_EXECUTION_FAILED, cudaSuccess,
                                                   "cublasLtMatmulAlgoGetHeuristic", "z.cc", 10);
  EXPECT_FALSE(NoMatmulAlgorithm(failed));
  EXPECT_FALSE(FallBackToPlainGemm(failed, CUBLASLT_EPILOGUE_GELU_BIAS));
  EXPECT_FALSE(FallBackToPlainGemm(absl::OkStatus(), CUBLASLT_EPILOGUE_GELU_BIAS));
  EXPECT_FALSE(FallBackToPlainGemm(absl::InvalidArgumentError("x"), CUBLASLT_EPILOGUE_GELU_BIAS));
}

TEST(GemmFallbackTest, ASuccessfulAnswerIsItsAlgorithm) {
  const auto answer = HeuristicAnswer(CUBLAS_STATUS_SUCCESS, 1, Result(CUBLAS_STATUS_SUCCESS));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->data[0], 42u);
}

}  // namespace
}  // namespace sluice::engine::cuda
