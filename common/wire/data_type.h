#pragma once

// The tensor element types of the KServe v2 protocol, by their protocol names ("BOOL", "UINT8",
// ..., "FP16", "BF16", "FP32", "FP64", "BYTES"), and their sizes. The one table of them: the
// engine (engine/core/data_type.h re-exports these names), the server and the client all use it.
// Pure functions, safe from any thread.

#include <cstddef>

#include "absl/strings/string_view.h"

namespace sluice::wire {

enum class DataType {
  kInvalid,
  kBool,
  kUint8,
  kUint16,
  kUint32,
  kUint64,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFp16,
  kBf16,
  kFp32,
  kFp64,
  // Variable-length byte strings; in raw form each element is a 4-byte little-endian length
  // followed by that many bytes (wire/bytes_elements.h).
  kBytes,
};

// The KServe v2 name ("FP32"); "INVALID" for kInvalid.
absl::string_view DataTypeName(DataType type);

// Parses a KServe v2 name; returns kInvalid for anything else (case-sensitive, as the protocol).
DataType DataTypeFromName(absl::string_view name);

// Bytes per element; 0 for kBytes (variable) and kInvalid.
size_t DataTypeByteSize(DataType type);

}  // namespace sluice::wire
