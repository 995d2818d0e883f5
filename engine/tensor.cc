#include "engine/tensor.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sluice::engine {

absl::StatusOr<int64_t> ElementCount(std::span<const int64_t> shape) {
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

absl::Status ValidateBytesElements(absl::string_view tensor_name, std::span<const std::byte> data,
                                   int64_t elements) {
  size_t offset = 0;
  for (int64_t i = 0; i < elements; ++i) {
    if (data.size() - offset < 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", tensor_name, "': BYTES element ", i, " of ", elements,
                       " has no 4-byte length prefix (", data.size(), " bytes in all)"));
    }
    uint32_t length;
    std::memcpy(&length, data.data() + offset, 4);  // little-endian on every target we build for
    offset += 4;
    if (length > data.size() - offset) {
      return absl::InvalidArgumentError(absl::StrCat("input '", tensor_name, "': BYTES element ", i,
                                                     " declares ", length, " bytes but only ",
                                                     data.size() - offset, " remain"));
    }
    offset += length;
  }
  if (offset != data.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", tensor_name, "': ", data.size() - offset, " bytes left over after ",
                     elements, " BYTES elements"));
  }
  return absl::OkStatus();
}

std::string ShapeToString(std::span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

}  // namespace sluice::engine
