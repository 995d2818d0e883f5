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
#include "common/wire/shape.h"
#include "engine/data_type.h"

namespace sluice::engine {

using Shape = std::vector<int64_t>;

// Element counts and byte sizes are wire rules (common/wire/shape.h): ElementCount(shape) is
// InvalidArgument if a dimension is negative or the product overflows int64; FixedByteSize(type,
// elements) is InvalidArgument for BYTES (variable) and on overflow; ShapeToString gives "[1,16]".
using wire::ElementCount;
using wire::FixedByteSize;
using wire::ShapeToString;

// Checks that `data` holds exactly `elements` BYTES elements (4-byte little-endian length, then
// the bytes), every length within bounds. The message names `tensor_name`.
absl::Status ValidateBytesElements(absl::string_view tensor_name, std::span<const std::byte> data,
                                   int64_t elements);

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
