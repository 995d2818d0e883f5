#include "engine/cuda/cuda_check.h"

#include "absl/strings/cord.h"
#include "engine/core/device_fault.h"
#include "engine/cuda/cublaslt_algo.h"
#include "engine/cuda/cublaslt_api.h"

namespace sluice::engine::cuda {

// The table in engine/core/device_fault.cc numbers the codes without the CUDA headers; these are
// the codes every supported toolkit (12.x, 13.x) has.
static_assert(cudaErrorECCUncorrectable == 214 && cudaErrorIllegalAddress == 700 &&
                  cudaErrorLaunchTimeout == 702 && cudaErrorAssert == 710 &&
                  cudaErrorHardwareStackError == 714 && cudaErrorIllegalInstruction == 715 &&
                  cudaErrorMisalignedAddress == 716 && cudaErrorInvalidAddressSpace == 717 &&
                  cudaErrorInvalidPc == 718 && cudaErrorLaunchFailure == 719 &&
                  cudaErrorMemoryAllocation == 2 && cudaErrorInvalidConfiguration == 9 &&
                  cudaErrorLaunchOutOfResources == 701 && cudaErrorInvalidValue == 1,
              "CUDA error numbers differ from engine/core/device_fault.cc's table");

absl::Status CudaError(cudaError_t error, const char* expr, const char* file, int line) {
  const std::string message =
      absl::StrCat(expr, " failed at ", file, ":", line, ": ", cudaGetErrorString(error), " (",
                   cudaGetErrorName(error), ")");
  if (IsStickyCudaError(static_cast<int>(error))) {
    // Nothing clears it: the context is unusable and the process must exit (device_fault.h).
    return MarkProcessFatal(absl::InternalError(message));
  }
  // A recoverable error is also the thread's "last error" until read: read (and so clear) it
  // here, so that the next launch's cudaGetLastError() check does not blame itself for this one.
  (void)cudaGetLastError();
  if (error == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

namespace {

// The state of the calling thread's CUDA context after a cuBLAS failure. cuBLASLt runs its own
// copy of the CUDA runtime, so this runtime's last-error state never sees its launches; a sticky
// fault, though, is answered by every call on the context, so one call that reaches the driver
// tells. Error paths only. A recoverable error this query itself raised (e.g. it is refused
// during a stream capture) is read back, so that the next launch's check does not blame itself.
cudaError_t ContextState() {
  const cudaError_t last = cudaPeekAtLastError();
  if (IsStickyCudaError(static_cast<int>(last))) return last;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  const cudaError_t state = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (!IsStickyCudaError(static_cast<int>(state)) && state != cudaSuccess) {
    (void)cudaGetLastError();
  }
  return state;
}

}  // namespace

absl::Status CublasError(cublasStatus_t status, const char* expr, const char* file, int line) {
  return CublasErrorInContext(status, ContextState(), expr, file, line);
}

absl::Status CublasErrorInContext(cublasStatus_t status, cudaError_t context_state,
                                  const char* expr, const char* file, int line) {
  // The library is loaded lazily (cublaslt_api.h): its own description when it is loaded, our
  // table of names always (tests feed codes without it).
  const CublasLtApi* api = LoadedCublasLt();
  std::string message = absl::StrCat(expr, " failed at ", file, ":", line, ": ",
                                     api == nullptr ? "" : api->GetStatusString(status),
                                     api == nullptr ? "" : " ", "(", CublasStatusName(status), ")");
  absl::Status result;
  if (IsStickyCudaError(static_cast<int>(context_state))) {
    // Nothing clears it: the context is unusable and the process must exit (device_fault.h).
    absl::StrAppend(&message, "; the CUDA context is lost: ", cudaGetErrorString(context_state),
                    " (", cudaGetErrorName(context_state), ")");
    result = MarkProcessFatal(absl::InternalError(message));
  } else if (status == CUBLAS_STATUS_ALLOC_FAILED) {
    result = absl::ResourceExhaustedError(message);
  } else {
    result = absl::InternalError(message);
  }
  result.SetPayload(kCublasStatusPayload, absl::Cord(absl::StrCat(static_cast<int>(status))));
  return result;
}

}  // namespace sluice::engine::cuda
