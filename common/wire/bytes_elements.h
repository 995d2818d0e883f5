#pragma once

// BYTES tensors in raw form: each element is a 4-byte little-endian length followed by that many
// bytes, the elements one after another. The one reader and writer of that framing. Pure, safe
// from any thread (a reader object is used by one thread at a time).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "absl/strings/string_view.h"
#include "common/wire/raw_value.h"

namespace sluice::wire {

inline constexpr size_t kBytesLengthPrefix = 4;

// Appends one element (prefix, then bytes) to `out`, a std::string or std::vector<std::byte>.
// REQUIRES: element.size() < 4 GiB (callers taking elements from a client check it).
template <typename Bytes>
void AppendBytesElement(Bytes& out, absl::string_view element) {
  const uint32_t length = static_cast<uint32_t>(element.size());
  const size_t at = out.size();
  out.resize(at + kBytesLengthPrefix + element.size());
  std::memcpy(out.data() + at, &length, kBytesLengthPrefix);
  if (!element.empty()) std::memcpy(out.data() + at + kBytesLengthPrefix, element.data(), length);
}

// Walks the elements of a raw BYTES tensor, checking the framing as it goes. It never reads past
// the end of `data`, whatever the lengths say (a length near 2^32 cannot wrap an offset).
//
//   BytesElementReader reader(raw);
//   absl::string_view element;
//   while (reader.Next(element)) Use(element);
//   if (reader.error() != BytesElementReader::Error::kNone) ...  // malformed
//
// The reader reports what went wrong with the numbers a message needs; callers word the message
// for their side of the wire.
class BytesElementReader {
 public:
  enum class Error {
    kNone,
    // Fewer than 4 bytes were left where element index() would start.
    kTruncatedLength,
    // Element index() declares declared_length() bytes, but only remaining() follow its prefix.
    kTruncatedElement,
  };

  explicit BytesElementReader(absl::string_view data) : data_(data) {}
  explicit BytesElementReader(std::span<const std::byte> data)
      : data_(reinterpret_cast<const char*>(data.data()), data.size()) {}

  // Reads the next element into `element` (a view into the data) and returns true; returns false
  // at the end of the data (error() == kNone) or at malformed framing (error() says what, and
  // every later call returns false).
  bool Next(absl::string_view& element) {
    if (error_ != Error::kNone || offset_ == data_.size()) return false;
    if (data_.size() - offset_ < kBytesLengthPrefix) {
      error_ = Error::kTruncatedLength;
      return false;
    }
    uint32_t length;
    std::memcpy(&length, data_.data() + offset_, kBytesLengthPrefix);
    const size_t remaining = data_.size() - offset_ - kBytesLengthPrefix;
    if (length > remaining) {
      error_ = Error::kTruncatedElement;
      declared_length_ = length;
      remaining_ = remaining;
      return false;
    }
    element = data_.substr(offset_ + kBytesLengthPrefix, length);
    offset_ += kBytesLengthPrefix + length;
    ++index_;
    return true;
  }

  Error error() const { return error_; }
  // Elements read so far; after an error, the index of the malformed element.
  int64_t index() const { return index_; }
  // Bytes consumed by the elements read so far.
  size_t offset() const { return offset_; }
  // Bytes after offset().
  size_t left() const { return data_.size() - offset_; }
  // kTruncatedElement only.
  uint32_t declared_length() const { return declared_length_; }
  size_t remaining() const { return remaining_; }

 private:
  absl::string_view data_;
  size_t offset_ = 0;
  int64_t index_ = 0;
  Error error_ = Error::kNone;
  uint32_t declared_length_ = 0;
  size_t remaining_ = 0;
};

}  // namespace sluice::wire
