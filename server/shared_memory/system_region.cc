#include "server/shared_memory/system_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace sluice::server::shm {
namespace {

std::string ErrnoText(int error) {
  return absl::StrCat(std::strerror(error), " (errno ", error, ")");
}

uint64_t PageSize() {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

absl::StatusOr<std::shared_ptr<SystemRegion>> SystemRegion::Create(
    const SystemRegionOptions& options, std::shared_ptr<RegionCounters> counters) {
  RETURN_IF_ERROR(ValidateShmKey(options.key));
  const std::string what =
      absl::StrCat("system shared-memory region '", options.name, "' (key '", options.key, "')");
  if (options.byte_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": byte_size is 0"));
  }
  // O_NOFOLLOW and O_CLOEXEC: the name is a plain name (ValidateShmKey), and the descriptor must
  // not leak into a child process.
  bool writable = true;
  int fd = shm_open(options.key.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0 && (errno == EACCES || errno == EROFS)) {
    writable = false;
    fd = shm_open(options.key.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
  }
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat(what, ": no shared-memory object has that key (shm_open: ", ErrnoText(error),
                       "); the client creates it before registering"));
    }
    if (error == EACCES) {
      return absl::PermissionDeniedError(
          absl::StrCat(what, ": the server may not open it (shm_open: ", ErrnoText(error), ")"));
    }
    return absl::InternalError(absl::StrCat(what, ": shm_open: ", ErrnoText(error)));
  }
  std::shared_ptr<SystemRegion> region(
      new SystemRegion(options, std::move(counters), fd, writable));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    return absl::InternalError(absl::StrCat(what, ": fstat: ", ErrnoText(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a shared-memory object"));
  }
  RETURN_IF_ERROR(CheckRange(absl::StrCat(what, ": the registered range"), options.offset,
                             options.byte_size, static_cast<uint64_t>(st.st_size)));
  const uint64_t page = PageSize();
  region->page_delta_ = options.offset % page;
  region->map_length_ = region->page_delta_ + options.byte_size;  // no overflow: <= st_size
  if (!region->ReserveMappedBytes(region->map_length_, options.max_mapped_bytes)) {
    region->map_length_ = 0;  // nothing reserved: the destructor releases nothing
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": mapping its ", options.byte_size, " bytes would pass the server's bound of ",
        options.max_mapped_bytes, " mapped shared-memory bytes (--shared-memory-max-bytes)"));
  }
  void* base = mmap(nullptr, region->map_length_, PROT_READ, MAP_SHARED, fd,
                    static_cast<off_t>(options.offset - region->page_delta_));
  if (base == MAP_FAILED) {
    const int error = errno;
    region->ReleaseMappedBytes(region->map_length_);
    region->map_length_ = 0;
    return absl::InternalError(absl::StrCat(what, ": mmap: ", ErrnoText(error)));
  }
  region->read_base_ = static_cast<const std::byte*>(base) + region->page_delta_;
  return region;
}

SystemRegion::SystemRegion(const SystemRegionOptions& options,
                           std::shared_ptr<RegionCounters> counters, int fd, bool fd_writable)
    : Region(options.name, RegionKind::kSystem, options.byte_size, std::move(counters)),
      key_(options.key),
      offset_(options.offset),
      max_mapped_bytes_(options.max_mapped_bytes),
      fd_(fd),
      fd_writable_(fd_writable) {}

SystemRegion::~SystemRegion() {
  if (read_base_ != nullptr) {
    munmap(const_cast<std::byte*>(read_base_ - page_delta_), map_length_);
    ReleaseMappedBytes(map_length_);
  }
  {
    common::MutexLock lock(&mu_);
    if (write_base_ != nullptr) {
      munmap(write_base_ - page_delta_, map_length_);
      ReleaseMappedBytes(map_length_);
    }
  }
  close(fd_);
  FinishDestruction();
}

bool SystemRegion::writable_mapped() const {
  common::MutexLock lock(&mu_);
  return write_base_ != nullptr;
}

absl::Status SystemRegion::CheckObjectSize() const {
  struct stat st {};
  if (fstat(fd_, &st) != 0) {
    return absl::InternalError(
        absl::StrCat("shared-memory region '", name(), "': fstat: ", ErrnoText(errno)));
  }
  if (static_cast<uint64_t>(st.st_size) < offset_ ||
      static_cast<uint64_t>(st.st_size) - offset_ < byte_size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared-memory region '", name(), "': its object '", key_, "' shrank to ",
                     st.st_size, " bytes, below the registered offset ", offset_, " + byte size ",
                     byte_size(), "; unregister and register it again"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::span<const std::byte>> SystemRegion::ReadView(uint64_t offset, uint64_t size) {
  RETURN_IF_ERROR(
      CheckRange(absl::StrCat("shared-memory region '", name(), "'"), offset, size, byte_size()));
  RETURN_IF_ERROR(CheckObjectSize());
  return std::span<const std::byte>(read_base_ + offset, size);
}

absl::Status SystemRegion::Write(uint64_t offset, std::span<const std::byte> data) {
  RETURN_IF_ERROR(CheckRange(absl::StrCat("shared-memory region '", name(), "'"), offset,
                             data.size(), byte_size()));
  RETURN_IF_ERROR(CheckObjectSize());
  std::byte* base = nullptr;
  {
    common::MutexLock lock(&mu_);
    if (write_base_ == nullptr) {
      if (!fd_writable_) {
        return absl::PermissionDeniedError(
            absl::StrCat("shared-memory region '", name(), "' (key '", key_,
                         "') could only be opened read-only, so it cannot receive an output"));
      }
      if (!ReserveMappedBytes(map_length_, max_mapped_bytes_)) {
        return absl::ResourceExhaustedError(
            absl::StrCat("shared-memory region '", name(),
                         "': mapping it writable for an output would pass the server's bound of ",
                         max_mapped_bytes_, " mapped bytes (--shared-memory-max-bytes)"));
      }
      void* mapped = mmap(nullptr, map_length_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_,
                          static_cast<off_t>(offset_ - page_delta_));
      if (mapped == MAP_FAILED) {
        const int error = errno;
        ReleaseMappedBytes(map_length_);
        return absl::InternalError(absl::StrCat("shared-memory region '", name(),
                                                "': mmap for writing: ", ErrnoText(error)));
      }
      write_base_ = static_cast<std::byte*>(mapped) + page_delta_;
    }
    base = write_base_;
  }
  // The mapping lives as long as this object; the copy runs outside the lock.
  if (!data.empty()) std::memcpy(base + offset, data.data(), data.size());
  return absl::OkStatus();
}

}  // namespace sluice::server::shm
