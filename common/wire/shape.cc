#include "common/wire/shape.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sluice::wire {

absl::StatusOr<int64_t> ElementCount(absl::Span<const int64_t> shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeToString(shape), " has a negative dimension"));
    }
    if (dim != 0 && count > std::numeric_limits<int64_t>::max() / dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeToString(shape), " has more elements than fit in 64 bits"));
    }
    count *= dim;
  }
  return count;
}

absl::StatusOr<size_t> FixedByteSize(DataType type, int64_t elements) {
  const size_t element_size = DataTypeByteSize(type);
  if (element_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data type ", DataTypeName(type), " has no fixed element size"));
  }
  if (elements < 0 ||
      static_cast<uint64_t>(elements) > std::numeric_limits<size_t>::max() / element_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(elements, " elements of ", DataTypeName(type), " overflow the byte size"));
  }
  return static_cast<size_t>(elements) * element_size;
}

std::string ShapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

}  // namespace sluice::wire
