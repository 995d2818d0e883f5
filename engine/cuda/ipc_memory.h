#pragma once

// CUDA IPC: device memory another process exported (cudaIpcGetMemHandle), opened here with
// cudaIpcOpenMemHandle; the engine's side of the server's CUDA shared-memory regions
// (engine::OpenCudaIpcMemory in engine/device.h is the entry point the server calls).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "engine/core/device_memory.h"

namespace sluice::engine::cuda {

// See engine::OpenCudaIpcMemory.
absl::StatusOr<std::unique_ptr<ImportedDeviceMemory>> OpenIpcMemory(
    std::span<const std::byte> handle, int device, uint64_t byte_size);

}  // namespace sluice::engine::cuda
