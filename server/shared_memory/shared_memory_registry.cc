#include "server/shared_memory/shared_memory_registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/echo.h"
#include "common/status_macros.h"
#include "server/shared_memory/cuda_region.h"
#include "server/shared_memory/system_region.h"

namespace sluice::server::shm {

SharedMemoryRegistry::SharedMemoryRegistry(SharedMemoryRegistryOptions options)
    : options_(std::move(options)) {}

SharedMemoryRegistry::~SharedMemoryRegistry() {
  common::MutexLock lock(&mu_);
  for (auto& [name, entry] : regions_) entry.region->MarkUnregistered();
}

absl::Status SharedMemoryRegistry::CheckCanAdd(const std::string& name) const {
  if (options_.max_regions <= 0) {
    return absl::FailedPreconditionError(
        "shared memory is turned off on this server (--shared-memory-max-regions=0)");
  }
  if (auto it = regions_.find(name); it != regions_.end()) {
    return absl::AlreadyExistsError(
        absl::StrCat("shared-memory region '", name, "' is already registered (",
                     RegionKindName(it->second.info.kind), "); unregister it first"));
  }
  if (regions_.size() >= static_cast<size_t>(options_.max_regions)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot register shared-memory region '", name, "': ", regions_.size(),
                     " regions are registered, the server's bound (--shared-memory-max-regions)"));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::Add(Entry entry) {
  common::MutexLock lock(&mu_);
  // Checked again: another registration may have won the name while this one opened its object
  // (the region is then dropped here, unmapped, as if never made).
  RETURN_IF_ERROR(CheckCanAdd(entry.info.name));
  const std::string name = entry.info.name;
  regions_.emplace(name, std::move(entry));
  return absl::OkStatus();
}

absl::Status SharedMemoryRegistry::RegisterSystem(const std::string& name, const std::string& key,
                                                  uint64_t offset, uint64_t byte_size) {
  RETURN_IF_ERROR(ValidateRegionName(name));
  RETURN_IF_ERROR(ValidateShmKey(key));
  {
    common::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckCanAdd(name));
  }
  // Opened and mapped outside the lock: Find() on the request path never waits for a syscall.
  ASSIGN_OR_RETURN(std::shared_ptr<SystemRegion> region,
                   SystemRegion::Create({.name = name,
                                         .key = key,
                                         .offset = offset,
                                         .byte_size = byte_size,
                                         .max_mapped_bytes = options_.max_mapped_bytes},
                                        counters_));
  return Add({.region = std::move(region),
              .info = {.name = name,
                       .kind = RegionKind::kSystem,
                       .key = key,
                       .offset = offset,
                       .byte_size = byte_size}});
}

absl::Status SharedMemoryRegistry::RegisterCuda(const std::string& name,
                                                std::span<const std::byte> raw_handle,
                                                int64_t device_id, uint64_t byte_size) {
  RETURN_IF_ERROR(ValidateRegionName(name));
  if (!options_.open_cuda_ipc) {
    return absl::FailedPreconditionError(absl::StrCat("cannot register CUDA shared-memory region '",
                                                      name, "': ", options_.cuda_unavailable_reason,
                                                      "; use system shared memory on this server"));
  }
  if (raw_handle.size() != kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA shared-memory region '", name, "': raw_handle is ", raw_handle.size(),
                     " bytes; a cudaIpcMemHandle_t is ", kCudaIpcHandleBytes));
  }
  if (device_id < 0 || device_id > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA shared-memory region '", name, "': device_id ", device_id));
  }
  if (byte_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA shared-memory region '", name, "': byte_size is 0"));
  }
  {
    common::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckCanAdd(name));
  }
  if (!TryReserveMappedBytes(*counters_, byte_size, options_.max_mapped_bytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("CUDA shared-memory region '", name, "': its ", byte_size,
                     " bytes would pass the server's bound of ", options_.max_mapped_bytes,
                     " mapped shared-memory bytes (--shared-memory-max-bytes)"));
  }
  absl::StatusOr<std::unique_ptr<engine::ImportedDeviceMemory>> memory =
      options_.open_cuda_ipc(raw_handle, static_cast<int>(device_id), byte_size);
  if (!memory.ok()) {
    counters_->mapped_bytes.fetch_sub(byte_size);
    return absl::Status(memory.status().code(), absl::StrCat("CUDA shared-memory region '", name,
                                                             "': ", memory.status().message()));
  }
  auto region = std::make_shared<CudaRegion>(name, *std::move(memory), counters_);
  return Add({.region = std::move(region),
              .info = {.name = name,
                       .kind = RegionKind::kCuda,
                       .byte_size = byte_size,
                       .device_id = static_cast<int>(device_id)}});
}

absl::Status SharedMemoryRegistry::Unregister(RegionKind kind, const std::string& name) {
  // Regions are destroyed (unmapped) outside the lock, when the last lease goes.
  std::vector<std::shared_ptr<Region>> dropped;
  {
    common::MutexLock lock(&mu_);
    if (name.empty()) {
      for (auto it = regions_.begin(); it != regions_.end();) {
        if (it->second.info.kind == kind) {
          dropped.push_back(std::move(it->second.region));
          it = regions_.erase(it);
        } else {
          ++it;
        }
      }
    } else {
      auto it = regions_.find(name);
      if (it == regions_.end() || it->second.info.kind != kind) {
        return absl::NotFoundError(absl::StrCat("no ", RegionKindName(kind),
                                                " shared-memory region named '",
                                                common::EchoInput(name), "' is registered"));
      }
      dropped.push_back(std::move(it->second.region));
      regions_.erase(it);
    }
  }
  for (const auto& region : dropped) region->MarkUnregistered();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RegionInfo>> SharedMemoryRegistry::Status(
    RegionKind kind, const std::string& name) const {
  std::vector<RegionInfo> out;
  common::MutexLock lock(&mu_);
  if (name.empty()) {
    for (const auto& [region_name, entry] : regions_) {
      if (entry.info.kind == kind) out.push_back(entry.info);
    }
    return out;
  }
  auto it = regions_.find(name);
  if (it == regions_.end() || it->second.info.kind != kind) {
    return absl::NotFoundError(absl::StrCat("no ", RegionKindName(kind),
                                            " shared-memory region named '",
                                            common::EchoInput(name), "' is registered"));
  }
  out.push_back(it->second.info);
  return out;
}

absl::StatusOr<std::shared_ptr<Region>> SharedMemoryRegistry::Find(absl::string_view name,
                                                                   absl::string_view tensor) const {
  common::MutexLock lock(&mu_);
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(tensor, ": no shared-memory region named '",
                                                   common::EchoInput(name), "' is registered"));
  }
  return it->second.region;
}

SharedMemoryStats SharedMemoryRegistry::Stats() const {
  SharedMemoryStats stats;
  {
    common::MutexLock lock(&mu_);
    for (const auto& [name, entry] : regions_) {
      ++(entry.info.kind == RegionKind::kCuda ? stats.cuda_regions : stats.system_regions);
    }
  }
  stats.mapped_bytes = counters_->mapped_bytes.load();
  stats.draining_regions = counters_->draining_regions.load();
  return stats;
}

}  // namespace sluice::server::shm
