#pragma once

// SharedMemoryRegistry: the server's table of registered shared-memory regions (Triton's system
// and CUDA shared-memory extensions), one per process, used by the gRPC service and the HTTP
// routes alike. Register/Unregister/Status are the extension's control calls; Find() hands a
// request a shared reference to a region (a lease) that keeps the mapping alive until the
// request completes, whatever the client unregisters meanwhile.
//
// Bounded: at most `max_regions` regions and `max_mapped_bytes` bytes mapped at once (regions
// unregistered but still in use count until they are gone).
//
// Thread-safe. Owned by main; outlived by nothing it hands out (leases keep their region alive
// on their own).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "engine/core/device_memory.h"
#include "server/shared_memory/region.h"

namespace sluice::server::shm {

struct SharedMemoryRegistryOptions {
  // Regions (system and CUDA together) registered at once (--shared-memory-max-regions).
  // 0 turns the extensions off: every Register answers FailedPrecondition saying so.
  int max_regions = 64;
  // Bytes of client memory mapped at once (--shared-memory-max-bytes). Mapping costs address
  // space, not memory (the pages are the client's), but it is bounded all the same.
  uint64_t max_mapped_bytes = uint64_t{16} << 30;
  // Opens a CUDA IPC handle; null on a server that runs no GPU (then CUDA registration answers
  // FailedPrecondition with `cuda_unavailable_reason`). main wires engine::OpenCudaIpcMemory
  // when the server runs on a GPU.
  std::function<absl::StatusOr<std::unique_ptr<engine::ImportedDeviceMemory>>(
      std::span<const std::byte> handle, int device, uint64_t byte_size)>
      open_cuda_ipc;
  // Why CUDA shared memory is unavailable, for the error message (when open_cuda_ipc is null).
  std::string cuda_unavailable_reason = "this server runs no GPU";
};

// What Status reports for one region.
struct RegionInfo {
  std::string name;
  RegionKind kind = RegionKind::kSystem;
  std::string key;  // system regions
  uint64_t offset = 0;
  uint64_t byte_size = 0;
  int device_id = 0;  // CUDA regions
};

// A snapshot for the metrics exporter.
struct SharedMemoryStats {
  int64_t system_regions = 0;
  int64_t cuda_regions = 0;
  uint64_t mapped_bytes = 0;
  int64_t draining_regions = 0;
};

class SharedMemoryRegistry {
 public:
  explicit SharedMemoryRegistry(SharedMemoryRegistryOptions options);
  ~SharedMemoryRegistry();
  SharedMemoryRegistry(const SharedMemoryRegistry&) = delete;
  SharedMemoryRegistry& operator=(const SharedMemoryRegistry&) = delete;

  // Maps [offset, offset + byte_size) of the POSIX object `key` under `name`. InvalidArgument for
  // a bad name or key or a range outside the object; AlreadyExists if `name` is registered (of
  // either kind); NotFound if the object does not exist; ResourceExhausted past the bounds;
  // FailedPrecondition when the extension is off.
  absl::Status RegisterSystem(const std::string& name, const std::string& key, uint64_t offset,
                              uint64_t byte_size);
  // Opens the CUDA IPC handle `raw_handle` (cudaIpcMemHandle_t bytes) on GPU `device_id` under
  // `name`. As RegisterSystem, and FailedPrecondition on a server that runs no GPU.
  absl::Status RegisterCuda(const std::string& name, std::span<const std::byte> raw_handle,
                            int64_t device_id, uint64_t byte_size);
  // Drops region `name` of `kind` from the table ("" = every region of that kind). NotFound if
  // no region of that kind has the name. A region in use stays mapped until its last request
  // completes.
  absl::Status Unregister(RegionKind kind, const std::string& name);
  // The regions of `kind` ("" = all, ordered by name); NotFound for an unknown name.
  absl::StatusOr<std::vector<RegionInfo>> Status(RegionKind kind, const std::string& name) const;

  // A lease on region `name` for one request. InvalidArgument (naming `tensor`, e.g.
  // "input 'x'") if no region has it: the request is at fault, not a missing model.
  absl::StatusOr<std::shared_ptr<Region>> Find(absl::string_view name,
                                               absl::string_view tensor) const;

  SharedMemoryStats Stats() const;

 private:
  struct Entry {
    std::shared_ptr<Region> region;
    RegionInfo info;
  };
  // FailedPrecondition/AlreadyExists/ResourceExhausted before anything is opened.
  absl::Status CheckCanAdd(const std::string& name) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Add(Entry entry);

  const SharedMemoryRegistryOptions options_;
  const std::shared_ptr<RegionCounters> counters_ = std::make_shared<RegionCounters>();
  mutable common::Mutex mu_;
  std::map<std::string, Entry, std::less<>> regions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::server::shm
