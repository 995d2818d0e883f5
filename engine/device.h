#pragma once

// Device selection for --device=auto|cpu|cuda:N, decided once at start-up. With
// executor_factory.cc (which builds the executors on the device chosen here), the only code that
// knows whether this build has CUDA (STYLE rule 20: the #if lives in those two .cc files).

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice::engine {

struct DeviceSelection {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int cuda_device = -1;
  // One line for the log that says what runs where and why (e.g. why auto fell back to the CPU).
  std::string description;
};

// "cpu": the CPU backend. "auto": GPU 0 if this build has the CUDA backend and a GPU is usable,
// else the CPU backend, with the reason in `description`. "cuda:N": GPU N or an error
// (FailedPrecondition when the device is missing or unusable or the build has no CUDA backend,
// InvalidArgument for anything else).
absl::StatusOr<DeviceSelection> SelectDevice(absl::string_view flag);

}  // namespace sluice::engine
