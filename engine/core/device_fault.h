#pragma once

// Device faults that end the process. After some CUDA errors (an illegal address, a device-side
// assert, an uncorrectable ECC error, ...) the process's CUDA context is unusable: the runtime
// documents that every later CUDA call returns the same error and that the process must be
// terminated and relaunched. Such a fault is not one model instance's problem (every other model
// on the device would fail next, and a reload cannot work), so the engine turns it into a process
// exit that the orchestrator answers with a restart (EngineOptions::on_process_fatal). Every other
// device error is recoverable: the instance that hit it is unhealthy and its model version
// UNAVAILABLE until a reload, the rest of the process serves on.
//
// The classification table is here, in the engine's core, without CUDA headers, so that the CPU
// build's fault injection (fault_injection.h) classifies an injected code exactly as the CUDA
// executor classifies a real one; engine/cuda/cuda_check.cc checks the numbers against the CUDA
// headers at compile time.

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sluice::engine {

// A CUDA runtime error code as cudaError_t numbers it, with its name.
struct CudaErrorCode {
  int code = 0;
  absl::string_view name;  // "cudaErrorIllegalAddress"
  // The context is unusable after it: the process must exit.
  bool sticky = false;
};

// Whether CUDA error `code` leaves the process's context unusable (the codes whose runtime
// documentation says the process must be terminated and relaunched).
bool IsStickyCudaError(int code);

// The code named `name` ("cudaErrorIllegalAddress"), from the sticky list and a few recoverable
// ones that tests inject (cudaErrorLaunchOutOfResources, cudaErrorInvalidConfiguration,
// cudaErrorMemoryAllocation); nullopt for any other name.
std::optional<CudaErrorCode> FindCudaErrorCode(absl::string_view name);

// `status` marked as a process-fatal device fault (a payload; code and message unchanged).
// REQUIRES: !status.ok().
absl::Status MarkProcessFatal(absl::Status status);
// Whether `status` carries that mark. Payloads survive RETURN_IF_ERROR and copies; code that
// rewrites a status keeps them (SlotPipeline does).
bool IsProcessFatal(const absl::Status& status);

// Sets every payload of `from` on `to` (a status rebuilt with more context keeps its marks).
void CopyPayloads(const absl::Status& from, absl::Status& to);

// `status` with code INTERNAL, the same message and every payload (so a process-fatal mark
// survives). OK stays OK.
absl::Status WithInternalCode(const absl::Status& status);

}  // namespace sluice::engine
