#include "server/shared_memory/region.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/echo.h"

namespace sluice::server::shm {

absl::string_view RegionKindName(RegionKind kind) {
  return kind == RegionKind::kCuda ? "CUDA" : "system";
}

absl::Status ValidateRegionName(absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("shared-memory region name is empty");
  if (name.size() > kMaxRegionNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("shared-memory region name '",
                                                   common::EchoInput(name), "' is ", name.size(),
                                                   " bytes, longer than ", kMaxRegionNameBytes));
  }
  for (char c : name) {
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat("shared-memory region name '",
                                                     common::EchoInput(name),
                                                     "' holds a character that is not printable "
                                                     "ASCII"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateShmKey(absl::string_view key) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("shared-memory key '", common::EchoInput(key),
                                                   "' is not a POSIX shared-memory name: ", why));
  };
  if (key.size() < 2 || key[0] != '/') return bad("it must be '/' followed by a name");
  if (key.size() > kMaxShmKeyBytes) {
    return bad(absl::StrCat("it is ", key.size(), " bytes, longer than ", kMaxShmKeyBytes));
  }
  const absl::string_view rest = key.substr(1);
  if (rest == "." || rest == "..") return bad("'.' and '..' are not names");
  for (char c : rest) {
    if (c == '/') return bad("a name holds no '/' after the first (paths are refused)");
    if (c < 0x21 || c > 0x7e) return bad("a name is printable ASCII without spaces");
  }
  return absl::OkStatus();
}

absl::Status CheckRange(absl::string_view what, uint64_t offset, uint64_t size, uint64_t limit) {
  // offset <= limit first, so that limit - offset cannot wrap.
  if (offset > limit || size > limit - offset) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": offset ", offset, " + byte size ", size,
                                                   " runs past its ", limit, " bytes"));
  }
  return absl::OkStatus();
}

Region::Region(std::string name, RegionKind kind, uint64_t byte_size,
               std::shared_ptr<RegionCounters> counters)
    : counters_(std::move(counters)), name_(std::move(name)), kind_(kind), byte_size_(byte_size) {}

void Region::MarkUnregistered() {
  if (!unregistered_.exchange(true)) counters_->draining_regions.fetch_add(1);
}

bool TryReserveMappedBytes(RegionCounters& counters, uint64_t bytes, uint64_t max_bytes) {
  uint64_t current = counters.mapped_bytes.load();
  do {
    if (current > max_bytes || bytes > max_bytes - current) return false;
  } while (!counters.mapped_bytes.compare_exchange_weak(current, current + bytes));
  return true;
}

bool Region::ReserveMappedBytes(uint64_t bytes, uint64_t max_bytes) {
  return TryReserveMappedBytes(*counters_, bytes, max_bytes);
}

void Region::ReleaseMappedBytes(uint64_t bytes) { counters_->mapped_bytes.fetch_sub(bytes); }

void Region::FinishDestruction() {
  if (unregistered_.load()) counters_->draining_regions.fetch_sub(1);
}

}  // namespace sluice::server::shm
