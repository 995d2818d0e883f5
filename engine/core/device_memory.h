#pragma once

// ImportedDeviceMemory: the engine core's view of device memory that another process exported
// (the server's CUDA shared-memory regions). The interface lives in the core because tensors
// (engine/core/tensor.h, DeviceBytes) and executors read through it; the one implementation is
// engine/cuda/ipc_memory.cc, opened through engine::OpenCudaIpcMemory (engine/device.h).

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace sluice::engine {

// Device memory another process exported with cudaIpcGetMemHandle, opened in this one (the
// server's CUDA shared-memory regions). Owns the opened mapping (cudaIpcCloseMemHandle in the
// destructor). Requests reference it through DeviceBytes (engine/core/tensor.h), whose keepalive
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

}  // namespace sluice::engine
