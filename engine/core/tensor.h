#pragma once

// Shapes and tensors as the engine sees them: plain C++, no protobuf.
//  - TensorView borrows its bytes (for example from a gRPC request message kept alive by the
//    request's keep-alive handle); it never owns them. Its bytes are in host memory (`data`), or
//    in device memory (`device`: an input a client placed in a CUDA shared-memory region).
//  - Tensor owns its bytes (model outputs).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/wire/shape.h"
#include "engine/core/data_type.h"

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

class ImportedDeviceMemory;  // engine/core/device_memory.h

// A tensor's bytes in device memory rather than host memory: [offset, offset + byte_size) of a
// mapping another process exported (a CUDA shared-memory region, opened with
// cudaIpcOpenMemHandle). Plain data: no CUDA, server or gRPC types.
//
// Lifetime: `keepalive` holds the mapping open (for the server, the region's lease), and so does
// every copy of this struct. A request's copy lives until the request is destroyed, after its
// answer; an executor that reads the bytes on a device keeps its own copy until the device work
// that reads them has completed, which may be later (a batch that faulted with copies still
// queued): the mapping is never closed under an in-flight batch.
//
// Who reads it (never the RPC thread): the CUDA executor copies device to device on its input
// stream (address(), device()); the CPU executor copies device to host on its own thread
// (memory->CopyToHost). ValidateDeviceBytes checks one before it is queued.
struct DeviceBytes {
  // The opened mapping. Borrowed: `keepalive` keeps it alive. Non-null.
  const ImportedDeviceMemory* memory = nullptr;
  // The tensor's first byte, counted from the start of `memory`, and its length.
  uint64_t offset = 0;
  uint64_t byte_size = 0;
  // Owns whatever keeps `memory` open. Non-null.
  std::shared_ptr<const void> keepalive;

  // The GPU the mapping is on.
  int device() const;
  // The tensor's first byte as a device address in this process (valid on device()).
  const void* address() const;
};

// A borrowed tensor.
struct TensorView {
  std::string name;
  DataType dtype = DataType::kInvalid;
  Shape shape;
  // The bytes, when they are in host memory; empty when `device` is set.
  std::span<const std::byte> data;
  // Set when the bytes are in device memory instead (never for BYTES tensors, whose framing is
  // checked on the host before they are queued). Code that reads `data` without looking here
  // sees an empty span and fails on the size, never reads device memory as host memory.
  std::optional<DeviceBytes> device;

  bool on_device() const { return device.has_value(); }
  // The tensor's length in bytes, wherever it is.
  uint64_t byte_size() const { return device.has_value() ? device->byte_size : data.size(); }
};

// Checks a device-memory input before it is queued: InvalidArgument naming `tensor_name` for a
// null mapping or keepalive, or a range [offset, offset + byte_size) (overflow-checked) outside
// the mapping.
absl::Status ValidateDeviceBytes(absl::string_view tensor_name, const DeviceBytes& bytes);

// An owned tensor.
struct Tensor {
  std::string name;
  DataType dtype = DataType::kInvalid;
  Shape shape;
  std::vector<std::byte> data;

  TensorView View() const { return TensorView{name, dtype, shape, data}; }
};

}  // namespace sluice::engine
