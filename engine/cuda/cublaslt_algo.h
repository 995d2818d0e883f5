#pragma once

// What cuBLASLt's answers mean for choosing a GEMM, as plain functions of status codes (no
// device, no loaded library: unit-tested on machines without a GPU, cublaslt_algo_test.cc).
//
// cuBLASLt says "I have nothing for this GEMM" in three ways: the heuristic call itself returns
// CUBLAS_STATUS_NOT_SUPPORTED (a type / layout / epilogue combination this version refuses
// outright), it returns SUCCESS with zero results, or its one result carries a state other than
// SUCCESS. All three mean the same to a caller that can compute the layer another way (a plain
// GEMM and our own bias + activation kernel): NotFound. Any other failure is a real error.

#include <cublasLt.h>

#include <optional>

#include "absl/status/statusor.h"

namespace sluice::engine::cuda {

// The algorithm of a cublasLtMatmulAlgoGetHeuristic call that returned `call` with `found`
// results, the first being `result`. NotFound (naming the status) when cuBLASLt has nothing for
// this GEMM (see above); the CublasError of `call` for any other failed call (so a sticky device
// fault is still marked process-fatal).
absl::StatusOr<cublasLtMatmulAlgo_t> HeuristicAnswer(cublasStatus_t call, int found,
                                                     const cublasLtMatmulHeuristicResult_t& result);

// Whether `status` says cuBLASLt has no algorithm for a GEMM: NotFound (HeuristicAnswer), or
// any cuBLAS call that answered CUBLAS_STATUS_NOT_SUPPORTED (CublasError records the code).
bool NoMatmulAlgorithm(const absl::Status& status);

// Whether a GEMM whose algorithm search with `epilogue` ended with `picked` should be set up
// again as a plain GEMM (CUBLASLT_EPILOGUE_DEFAULT) followed by our own bias + activation kernel:
// only when it asked for a fused epilogue and cuBLASLt has no algorithm for it. The MLP and the
// encoder decide with this one function.
bool FallBackToPlainGemm(const absl::Status& picked, cublasLtEpilogue_t epilogue);

// The payload under which CublasError records the cuBLAS status code (decimal) in its status.
inline constexpr char kCublasStatusPayload[] = "type.sluice.dev/cublas-status";

// The cuBLAS status CublasError recorded in `status` (a payload), if any.
std::optional<cublasStatus_t> CublasStatusOf(const absl::Status& status);

// "CUBLAS_STATUS_NOT_SUPPORTED", ... without the library (for messages before it is loaded).
const char* CublasStatusName(cublasStatus_t status);

}  // namespace sluice::engine::cuda
