#pragma once

// CudaRegion: device memory a client exported with cudaIpcGetMemHandle and registered (Triton's
// CUDA shared-memory extension), opened through the engine (engine::OpenCudaIpcMemory). An input
// in it reaches the engine as device memory (engine::DeviceBytes, holding this region as its
// keepalive) and is read by the executor that runs it: device to device on the CUDA executor's
// input stream, device to host on the CPU executor's thread. Nothing is copied when a request is
// converted. Outputs are copied host to device when the request completes (Write, on the engine
// thread that answers the request, never an RPC thread). There is no host view (ReadView is
// Unimplemented).

#include <cstdint>
#include <memory>
#include <string>

#include "engine/core/device_memory.h"
#include "server/shared_memory/region.h"

namespace sluice::server::shm {

class CudaRegion final : public Region {
 public:
  // Takes the opened memory; its byte_size() is counted in RegionCounters::mapped_bytes (the
  // caller reserved it) and released by the destructor.
  CudaRegion(std::string name, std::unique_ptr<engine::ImportedDeviceMemory> memory,
             std::shared_ptr<RegionCounters> counters);
  ~CudaRegion() override;

  int device() const { return memory_->device(); }

  absl::StatusOr<std::span<const std::byte>> ReadView(uint64_t offset, uint64_t size) override;
  const engine::ImportedDeviceMemory* device_memory() const override { return memory_.get(); }
  absl::Status Write(uint64_t offset, std::span<const std::byte> data) override;

 private:
  const std::unique_ptr<engine::ImportedDeviceMemory> memory_;
};

}  // namespace sluice::server::shm
