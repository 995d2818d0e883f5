#pragma once

// Device selection for --device=auto|cpu|cuda:N, decided once at start-up. With
// executor_factory.cc (which builds the executors on the device chosen here), the only code that
// knows whether this build has CUDA (STYLE rule 20: the #if lives in those two .cc files).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/device_memory.h"

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

// Opens `handle` (the 64 bytes of a cudaIpcMemHandle_t) on GPU `device`; `byte_size` is what the
// client says the allocation holds (CUDA cannot check it). FailedPrecondition when this build has
// no CUDA backend; InvalidArgument for a handle of the wrong size or a missing device; Internal
// naming the CUDA call otherwise (e.g. a handle from a process that has exited).
absl::StatusOr<std::unique_ptr<ImportedDeviceMemory>> OpenCudaIpcMemory(
    std::span<const std::byte> handle, int device, uint64_t byte_size);

}  // namespace sluice::engine
