#pragma once

// Shapes and tensors as the engine sees them: plain C++, no protobuf.
//  - TensorView borrows its bytes (for example from a gRPC request message kept alive by the
//    request's keep-alive handle); it never owns them.
//  - Tensor owns its bytes (model outputs).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/data_type.h"

namespace sluice::engine {

using Shape = std::vector<int64_t>;

// Number of elements of `shape`. InvalidArgument if a dimension is negative or the product
// overflows int64.
absl::StatusOr<int64_t> ElementCount(std::span<const int64_t> shape);

// `elements` x the byte size of `type`, overflow-checked. InvalidArgument for BYTES (variable) and
// on overflow.
absl::StatusOr<size_t> FixedByteSize(DataType type, int64_t elements);

// Checks that `data` holds exactly `elements` BYTES elements (4-byte little-endian length, then
// the bytes), every length within bounds. The message names `tensor_name`.
absl::Status ValidateBytesElements(absl::string_view tensor_name, std::span<const std::byte> data,
                                   int64_t elements);

// "[1,16]"
std::string ShapeToString(std::span<const int64_t> shape);

// A borrowed tensor.
struct TensorView {
  std::string name;
  DataType dtype = DataType::kInvalid;
  Shape shape;
  std::span<const std::byte> data;
};

// An owned tensor.
struct Tensor {
  std::string name;
  DataType dtype = DataType::kInvalid;
  Shape shape;
  std::vector<std::byte> data;

  TensorView View() const { return TensorView{name, dtype, shape, data}; }
};

}  // namespace sluice::engine
