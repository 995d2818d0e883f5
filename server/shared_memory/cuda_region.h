#pragma once

// CudaRegion: device memory a client exported with cudaIpcGetMemHandle and registered (Triton's
// CUDA shared-memory extension), opened through the engine (engine::OpenCudaIpcMemory). The
// engine's executors take host TensorViews, so inputs are copied device to host when a request
// is converted, and outputs host to device when it completes; there is no host view (ReadView is
// Unimplemented).

#include <cstdint>
#include <memory>
#include <string>

#include "engine/device.h"
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
  absl::Status CopyToHost(uint64_t offset, std::span<std::byte> out) override;
  absl::Status Write(uint64_t offset, std::span<const std::byte> data) override;

 private:
  const std::unique_ptr<engine::ImportedDeviceMemory> memory_;
};

}  // namespace sluice::server::shm
