#pragma once

// Raw tensor bytes: the elements packed little-endian in row-major order (BOOL one byte 0/1,
// FP16/BF16 their 16-bit patterns). Hosts are little-endian (asserted), so a value's raw form is
// its memory.

#include <bit>
#include <cstring>
#include <type_traits>

namespace sluice::wire {

static_assert(std::endian::native == std::endian::little,
              "raw tensor bytes are little-endian; this code copies host values as they are");

// Appends `value` in raw form to `out` (std::string or std::vector<std::byte>).
template <typename T, typename Bytes>
void AppendRawValue(Bytes& out, T value) {
  static_assert(std::is_arithmetic_v<T>);
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));
}

}  // namespace sluice::wire
