#include "engine/core/device_fault.h"

#include <array>

#include "absl/strings/cord.h"

namespace sluice::engine {
namespace {

constexpr absl::string_view kProcessFatalPayload = "type.sluice.dev/process-fatal-device-fault";

// Numbers as in CUDA 13's driver_types.h (cuda_check.cc static_asserts the ones every supported
// toolkit has). Sticky: the runtime's documentation of each says that the process is left in an
// inconsistent state and must be terminated and relaunched.
constexpr std::array<CudaErrorCode, 18> kCodes = {{
    {214, "cudaErrorECCUncorrectable", true},
    {226, "cudaErrorContained", true},
    {700, "cudaErrorIllegalAddress", true},
    {702, "cudaErrorLaunchTimeout", true},
    {710, "cudaErrorAssert", true},
    {714, "cudaErrorHardwareStackError", true},
    {715, "cudaErrorIllegalInstruction", true},
    {716, "cudaErrorMisalignedAddress", true},
    {717, "cudaErrorInvalidAddressSpace", true},
    {718, "cudaErrorInvalidPc", true},
    {719, "cudaErrorLaunchFailure", true},
    {721, "cudaErrorTensorMemoryLeak", true},
    {810, "cudaErrorMpsClientTerminated", true},
    {911, "cudaErrorExternalDevice", true},
    // Recoverable: the call failed, the context is fine.
    {2, "cudaErrorMemoryAllocation", false},
    {9, "cudaErrorInvalidConfiguration", false},
    {701, "cudaErrorLaunchOutOfResources", false},
    {1, "cudaErrorInvalidValue", false},
}};

}  // namespace

bool IsStickyCudaError(int code) {
  for (const CudaErrorCode& entry : kCodes) {
    if (entry.code == code) return entry.sticky;
  }
  return false;
}

std::optional<CudaErrorCode> FindCudaErrorCode(absl::string_view name) {
  for (const CudaErrorCode& entry : kCodes) {
    if (entry.name == name) return entry;
  }
  return std::nullopt;
}

absl::Status MarkProcessFatal(absl::Status status) {
  status.SetPayload(kProcessFatalPayload, absl::Cord("1"));
  return status;
}

bool IsProcessFatal(const absl::Status& status) {
  return status.GetPayload(kProcessFatalPayload).has_value();
}

void CopyPayloads(const absl::Status& from, absl::Status& to) {
  from.ForEachPayload(
      [&to](absl::string_view url, const absl::Cord& payload) { to.SetPayload(url, payload); });
}

absl::Status WithInternalCode(const absl::Status& status) {
  if (status.ok() || status.code() == absl::StatusCode::kInternal) return status;
  absl::Status internal = absl::InternalError(status.message());
  CopyPayloads(status, internal);
  return internal;
}

}  // namespace sluice::engine
