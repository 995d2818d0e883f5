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

// Device memory another process exported with cudaIpcGetMemHandle, opened in this one (the
// server's CUDA shared-memory regions). Owns the opened mapping (cudaIpcCloseMemHandle in the
// destructor). Requests reference it through DeviceBytes (engine/tensor.h), whose keepalive
// holds it open while any batch may still read it. Thread-safe.
//
// The two copies below wait for the device: they run on executor threads (the CPU executor's
// input copy) and on the engine thread that answers a request (outputs written back into a
// region), never on an RPC thread (ARCHITECTURE §2 rule 1). The CUDA executor does not use
// them: it copies device to device on its own stream from device_address().
class ImportedDeviceMemory {
 public:
  virtual ~ImportedDeviceMemory() = default;
  virtual int device() const = 0;
  virtual uint64_t byte_size() const = 0;
  // The mapping's first byte: a device address in this process, valid on device() while this
  // object lives.
  virtual const void* device_address() const = 0;
  // Copies [offset, offset + out.size()) to host memory `out` and waits for the copy.
  // REQUIRES: the range lies within byte_size() (the caller checks). Internal names a CUDA error.
  virtual absl::Status CopyToHost(uint64_t offset, std::span<std::byte> out) const = 0;
  // Copies host `data` to [offset, offset + data.size()) and waits for the copy. REQUIRES as above.
  virtual absl::Status CopyFromHost(uint64_t offset, std::span<const std::byte> data) = 0;
};

// Opens `handle` (the 64 bytes of a cudaIpcMemHandle_t) on GPU `device`; `byte_size` is what the
// client says the allocation holds (CUDA cannot check it). FailedPrecondition when this build has
// no CUDA backend; InvalidArgument for a handle of the wrong size or a missing device; Internal
// naming the CUDA call otherwise (e.g. a handle from a process that has exited).
absl::StatusOr<std::unique_ptr<ImportedDeviceMemory>> OpenCudaIpcMemory(
    std::span<const std::byte> handle, int device, uint64_t byte_size);

}  // namespace sluice::engine
