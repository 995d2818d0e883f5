#pragma once

// SystemRegion: a POSIX shared-memory object (shm_open) that a client registered, mapped into
// this process. Owns the descriptor and the mappings (closed and unmapped in the destructor).

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "server/shared_memory/region.h"

namespace sluice::server::shm {

struct SystemRegionOptions {
  // The client's label for the region (validated by the caller).
  std::string name;
  // The POSIX object name, "/something" (validated here too).
  std::string key;
  // Where the region starts in the object, and its length; the range must lie within the
  // object's current size.
  uint64_t offset = 0;
  uint64_t byte_size = 0;
  // The bound on RegionCounters::mapped_bytes that this region's mappings must respect.
  uint64_t max_mapped_bytes = 0;
};

class SystemRegion final : public Region {
 public:
  // Opens and maps the object read-only. InvalidArgument for a bad key, a zero size or a range
  // outside the object; NotFound if no object has that key; PermissionDenied if this process may
  // not read it; ResourceExhausted past max_mapped_bytes; Internal for other system errors (the
  // call and errno named).
  //
  // The object is opened read-write where its permissions allow (so that an output can later be
  // written without reopening it by name, which another process could by then have replaced),
  // else read-only; either way the mapping made here is PROT_READ: inputs are read through a
  // mapping that cannot write.
  static absl::StatusOr<std::shared_ptr<SystemRegion>> Create(
      const SystemRegionOptions& options, std::shared_ptr<RegionCounters> counters);
  ~SystemRegion() override;

  const std::string& key() const { return key_; }
  uint64_t offset() const { return offset_; }
  bool writable_mapped() const;

  absl::StatusOr<std::span<const std::byte>> ReadView(uint64_t offset, uint64_t size) override;
  absl::Status Write(uint64_t offset, std::span<const std::byte> data) override;

 private:
  SystemRegion(const SystemRegionOptions& options, std::shared_ptr<RegionCounters> counters, int fd,
               bool fd_writable);
  // OK if the object is still at least offset_ + byte_size() bytes long. Touching a mapped page
  // beyond the end of the object raises SIGBUS, and a client may ftruncate its object at any
  // time; this narrows that window to the request's own duration (it cannot close it: a client
  // that shrinks an object while a request reads it is not protected against).
  absl::Status CheckObjectSize() const;

  const std::string key_;
  const uint64_t offset_;
  const uint64_t max_mapped_bytes_;
  const int fd_;
  const bool fd_writable_;
  // mmap needs a page-aligned file offset: both mappings start at offset_ rounded down to a page,
  // and the region's first byte is `page_delta_` bytes into them.
  uint64_t page_delta_ = 0;
  uint64_t map_length_ = 0;
  const std::byte* read_base_ = nullptr;  // set in Create, then constant

  mutable common::Mutex mu_;
  // The writable mapping, made on the first Write().
  std::byte* write_base_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace sluice::server::shm
