#include "common/wire/data_type.h"

#include <array>

namespace sluice::wire {
namespace {

struct TypeInfo {
  DataType type;
  absl::string_view name;
  size_t byte_size;
};

// Indexed by the enum's value: DataTypeName and DataTypeByteSize are one array load.
constexpr std::array<TypeInfo, 15> kTypes = {{
    {DataType::kInvalid, "INVALID", 0},
    {DataType::kBool, "BOOL", 1},
    {DataType::kUint8, "UINT8", 1},
    {DataType::kUint16, "UINT16", 2},
    {DataType::kUint32, "UINT32", 4},
    {DataType::kUint64, "UINT64", 8},
    {DataType::kInt8, "INT8", 1},
    {DataType::kInt16, "INT16", 2},
    {DataType::kInt32, "INT32", 4},
    {DataType::kInt64, "INT64", 8},
    {DataType::kFp16, "FP16", 2},
    {DataType::kBf16, "BF16", 2},
    {DataType::kFp32, "FP32", 4},
    {DataType::kFp64, "FP64", 8},
    {DataType::kBytes, "BYTES", 0},
}};

const TypeInfo& Info(DataType type) { return kTypes[static_cast<size_t>(type)]; }

}  // namespace

absl::string_view DataTypeName(DataType type) { return Info(type).name; }

DataType DataTypeFromName(absl::string_view name) {
  for (const TypeInfo& info : kTypes) {
    if (info.type != DataType::kInvalid && info.name == name) return info.type;
  }
  return DataType::kInvalid;
}

size_t DataTypeByteSize(DataType type) { return Info(type).byte_size; }

}  // namespace sluice::wire
