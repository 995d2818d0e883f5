#pragma once

// Region: one shared-memory region a client registered (Triton's system and CUDA shared-memory
// extensions), and the checks every use of it goes through. A Region is shared (std::shared_ptr)
// by the registry and by every request that reads or writes it: unregistering drops only the
// registry's reference, so the mapping stays valid until the last request using it completed,
// then goes (munmap / cudaIpcCloseMemHandle in the destructor).
//
// No gRPC, protobuf or HTTP types: the gRPC and HTTP conversion layers both use this.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice::engine {
class ImportedDeviceMemory;  // engine/core/device_memory.h
}  // namespace sluice::engine

namespace sluice::server::shm {

enum class RegionKind { kSystem, kCuda };

// "system" or "CUDA", for messages.
absl::string_view RegionKindName(RegionKind kind);

// Longest region name a client may register (the name is echoed in errors and listed by status).
inline constexpr size_t kMaxRegionNameBytes = 255;
// Longest POSIX shared-memory key: "/" then at most NAME_MAX (255) characters.
inline constexpr size_t kMaxShmKeyBytes = 256;
// Size of a cudaIpcMemHandle_t (CUDA's CUDA_IPC_HANDLE_SIZE).
inline constexpr size_t kCudaIpcHandleBytes = 64;

// InvalidArgument unless `name` is 1..kMaxRegionNameBytes bytes of printable ASCII.
absl::Status ValidateRegionName(absl::string_view name);

// InvalidArgument unless `key` is a POSIX shared-memory object name: "/" followed by 1..255
// printable ASCII characters, none of them '/', and not "/." or "/..". Paths ("/dev/shm/x",
// "/../etc/passwd", "x/y") are refused: shm_open resolves names under /dev/shm, and a key that
// is not a plain name must not reach it.
absl::Status ValidateShmKey(absl::string_view key);

// InvalidArgument unless [offset, offset + size) lies within [0, limit), computed without
// overflow. `what` starts the message (e.g. "input 'x': region 'r'").
absl::Status CheckRange(absl::string_view what, uint64_t offset, uint64_t size, uint64_t limit);

// Counters the registry and its regions share; a region unregistered while in use keeps
// counting its bytes until it is unmapped, even after the registry itself is gone.
struct RegionCounters {
  // Bytes of client memory mapped into this process (system regions, each mapping once) or
  // opened (CUDA regions), including regions unregistered but still in use.
  std::atomic<uint64_t> mapped_bytes{0};
  // Regions unregistered whose mapping is still held by a request.
  std::atomic<int64_t> draining_regions{0};
};

// Adds `bytes` to counters.mapped_bytes if the sum stays within `max_bytes`; false (nothing
// added) if not.
bool TryReserveMappedBytes(RegionCounters& counters, uint64_t bytes, uint64_t max_bytes);

// Thread-safe: requests on any thread read and write through one Region at once. The client
// owns the bytes; it must not write an input region, or read an output region, before the
// request's answer arrived (the protocol's contract, as in Triton).
class Region {
 public:
  virtual ~Region() = default;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  const std::string& name() const { return name_; }
  RegionKind kind() const { return kind_; }
  // Bytes the client registered (its byte_size).
  uint64_t byte_size() const { return byte_size_; }

  // A read-only view of [offset, offset + size) of the region, valid while this Region lives.
  // InvalidArgument if the range is not within the region; FailedPrecondition if the client's
  // object shrank below the registered range since it was registered; Unimplemented for a
  // region not mapped in host memory (CUDA: see device_memory()).
  virtual absl::StatusOr<std::span<const std::byte>> ReadView(uint64_t offset, uint64_t size) = 0;
  // The opened device memory of a CUDA region, valid while this Region lives; null for a system
  // region. Requests reference it (engine::DeviceBytes) and the engine's executors read it; the
  // RPC thread never copies from it (ARCHITECTURE §2 rule 1).
  virtual const engine::ImportedDeviceMemory* device_memory() const { return nullptr; }
  // Copies `data` to [offset, offset + data.size()) of the region. The first write to a system
  // region maps it writable (a second mapping of the same range; regions only ever read are never
  // mapped writable); ResourceExhausted if that mapping would pass the server's mapped-bytes
  // bound, PermissionDenied if the object could only be opened read-only.
  virtual absl::Status Write(uint64_t offset, std::span<const std::byte> data) = 0;

  // Called by the registry when it drops the region: from then on the region counts as
  // draining (RegionCounters::draining_regions) until it is destroyed.
  void MarkUnregistered();

 protected:
  Region(std::string name, RegionKind kind, uint64_t byte_size,
         std::shared_ptr<RegionCounters> counters);
  // Adds `bytes` to the mapped-bytes counter if that stays within `max_bytes`; false if not.
  bool ReserveMappedBytes(uint64_t bytes, uint64_t max_bytes);
  void ReleaseMappedBytes(uint64_t bytes);
  // Subclasses' destructors call this last (it decrements draining_regions if marked).
  void FinishDestruction();

  const std::shared_ptr<RegionCounters> counters_;

 private:
  const std::string name_;
  const RegionKind kind_;
  const uint64_t byte_size_;
  std::atomic<bool> unregistered_{false};
};

}  // namespace sluice::server::shm
