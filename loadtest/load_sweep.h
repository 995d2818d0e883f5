#pragma once

// The load levels of a run, parsed from the command line's sweep syntax:
//
//   "8"            one level
//   "1:64:x2"      1, 2, 4, ..., 64      (start:end:xFACTOR, FACTOR > 1)
//   "100:400:+100" 100, 200, 300, 400    (start:end:+STEP, STEP > 0)
//   "1:4"          1, 2, 3, 4            (start:end, step +1)
//
// The end is included when the progression reaches it exactly, and is otherwise the last level
// below it. Pure functions; safe from any thread.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice::loadtest {

// No sweep may have more levels than this (each level costs at least a warm-up and a window).
inline constexpr int kMaxSweepLevels = 64;

// The levels of `spec`, in increasing order. InvalidArgument (naming the spec) for a malformed
// spec, a non-positive value, end < start, a factor <= 1, a step <= 0, or more than
// kMaxSweepLevels levels.
absl::StatusOr<std::vector<double>> ParseSweep(absl::string_view spec);

// ParseSweep for integer levels (concurrency): every level must be a whole number in
// [1, max_value]; InvalidArgument otherwise.
absl::StatusOr<std::vector<int64_t>> ParseIntegerSweep(absl::string_view spec, int64_t max_value);

}  // namespace sluice::loadtest
