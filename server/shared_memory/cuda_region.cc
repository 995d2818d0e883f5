#include "server/shared_memory/cuda_region.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace sluice::server::shm {

CudaRegion::CudaRegion(std::string name, std::unique_ptr<engine::ImportedDeviceMemory> memory,
                       std::shared_ptr<RegionCounters> counters)
    : Region(std::move(name), RegionKind::kCuda, memory->byte_size(), std::move(counters)),
      memory_(std::move(memory)) {}

CudaRegion::~CudaRegion() {
  ReleaseMappedBytes(byte_size());
  FinishDestruction();
}

absl::StatusOr<std::span<const std::byte>> CudaRegion::ReadView(uint64_t, uint64_t) {
  return absl::UnimplementedError(
      absl::StrCat("CUDA shared-memory region '", name(), "' has no host view"));
}

absl::Status CudaRegion::Write(uint64_t offset, std::span<const std::byte> data) {
  RETURN_IF_ERROR(CheckRange(absl::StrCat("CUDA shared-memory region '", name(), "'"), offset,
                             data.size(), byte_size()));
  return memory_->CopyFromHost(offset, data);
}

}  // namespace sluice::server::shm
