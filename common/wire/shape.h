#pragma once

// Element counts and byte sizes of KServe v2 tensors, overflow-checked. Pure functions, safe from
// any thread.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/wire/data_type.h"

namespace sluice::wire {

// Number of elements of `shape` (1 for rank 0). InvalidArgument if a dimension is negative (a -1
// "any size" dimension must be made concrete first: "shape [-1,16] has a negative dimension") or
// the product overflows int64 ("... has more elements than fit in 64 bits").
absl::StatusOr<int64_t> ElementCount(absl::Span<const int64_t> shape);

// `elements` x the byte size of `type`, overflow-checked. InvalidArgument for BYTES (variable),
// kInvalid, a negative count and on overflow.
absl::StatusOr<size_t> FixedByteSize(DataType type, int64_t elements);

// "[1,16]"
std::string ShapeToString(absl::Span<const int64_t> shape);

}  // namespace sluice::wire
