#pragma once

// Byte sizes as people write them: "64MiB", "4 GiB", "512KiB", "1500" (bytes), for flags and
// --help. Pure functions, safe from any thread.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice {

// Parses a non-negative byte count: digits, an optional space, and an optional unit, one of
// B, KiB, MiB, GiB, TiB, PiB (powers of 1024) or kB, MB, GB, TB, PB (powers of 1000); units are
// matched without regard to case ("64mib"), and K, M, G, T, P alone mean KiB...PiB. Returns
// InvalidArgument naming the text and the accepted units for anything else (a sign, a fraction,
// an unknown unit) and for a value above INT64_MAX.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

// The shortest exact form: "4 GiB" for 4294967296, "1536 KiB" for 1572864, "1000" for 1000 (a
// count that no binary unit divides is written in bytes, as a plain number). ParseByteSize reads
// every result back to `bytes`. REQUIRES: bytes >= 0.
std::string FormatByteSize(int64_t bytes);

}  // namespace sluice
