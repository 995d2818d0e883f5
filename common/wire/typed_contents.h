#pragma once

// KServe v2 typed tensor contents (`InferTensorContents`: bool_contents, int_contents, ...) to raw
// little-endian bytes. The one conversion the server (request inputs) and the client (response
// outputs) share. A template over the contents message, so this library needs no protobuf: any
// type with the accessors of inference::InferTensorContents works. Pure, safe from any thread.
//
// The rules: BOOL from bool_contents (one byte 0/1); INT8/16/32 from int_contents, INT64 from
// int64_contents, UINT8/16/32 from uint_contents, UINT64 from uint64_contents, each value range
// checked against the element type; FP32 from fp32_contents; FP64 from fp64_contents; BYTES from
// bytes_contents (length-prefixed); FP16 and BF16 have no typed field and must come raw.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/wire/bytes_elements.h"
#include "common/wire/data_type.h"

namespace sluice::wire {

// The outcome of TypedContentsToRaw, with what a caller needs to word an error.
struct TypedConversion {
  enum class Error {
    kNone,
    kInvalidType,     // DataType::kInvalid
    kNoTypedField,    // FP16, BF16
    kOutOfRange,      // field[index] = value does not fit the element type
    kElementTooLong,  // a BYTES element of 4 GiB or more
  };
  Error error = Error::kNone;
  // The contents field the type is read from ("int_contents"); empty for FP16/BF16/kInvalid.
  absl::string_view field;
  // Values in `field` (on success, the elements converted).
  int64_t count = 0;
  // kOutOfRange: the index of the first value that does not fit, and that value as text.
  int64_t index = 0;
  std::string value;
};

namespace internal {

// Appends `values` (a repeated field) as packed Out to `out`. A value that does not fit Out stops
// it: `result` says which, and `out` is left as it was.
template <typename Out, typename Values, typename Bytes>
TypedConversion Convert(const Values& values, absl::string_view field, Bytes& out) {
  using In = typename Values::value_type;
  TypedConversion result;
  result.field = field;
  result.count = static_cast<int64_t>(values.size());
  const size_t at = out.size();
  const size_t n = static_cast<size_t>(values.size());
  out.resize(at + n * sizeof(Out));
  if constexpr (std::is_same_v<In, Out>) {
    if (n > 0) std::memcpy(out.data() + at, &*values.begin(), n * sizeof(Out));
  } else {
    size_t i = 0;
    for (const In v : values) {
      if constexpr (std::is_integral_v<In> && !std::is_same_v<In, bool>) {
        if (!std::in_range<Out>(v)) {
          result.error = TypedConversion::Error::kOutOfRange;
          result.index = static_cast<int64_t>(i);
          result.value = absl::StrCat(v);
          out.resize(at);
          return result;
        }
      }
      const Out converted = static_cast<Out>(v);
      std::memcpy(out.data() + at + i * sizeof(Out), &converted, sizeof(Out));
      ++i;
    }
  }
  return result;
}

}  // namespace internal

// Appends the typed contents of a tensor of `type` to `out` (std::string or
// std::vector<std::byte>) in raw form. Checks value ranges, not the count against a shape (the
// caller knows the shape; result.count is what it compares). On error `out` may hold part of
// the tensor.
template <typename Contents, typename Bytes>
TypedConversion TypedContentsToRaw(const Contents& c, DataType type, Bytes& out) {
  using internal::Convert;
  switch (type) {
    case DataType::kBool:
      return Convert<uint8_t>(c.bool_contents(), "bool_contents", out);
    case DataType::kInt8:
      return Convert<int8_t>(c.int_contents(), "int_contents", out);
    case DataType::kInt16:
      return Convert<int16_t>(c.int_contents(), "int_contents", out);
    case DataType::kInt32:
      return Convert<int32_t>(c.int_contents(), "int_contents", out);
    case DataType::kInt64:
      return Convert<int64_t>(c.int64_contents(), "int64_contents", out);
    case DataType::kUint8:
      return Convert<uint8_t>(c.uint_contents(), "uint_contents", out);
    case DataType::kUint16:
      return Convert<uint16_t>(c.uint_contents(), "uint_contents", out);
    case DataType::kUint32:
      return Convert<uint32_t>(c.uint_contents(), "uint_contents", out);
    case DataType::kUint64:
      return Convert<uint64_t>(c.uint64_contents(), "uint64_contents", out);
    case DataType::kFp32:
      return Convert<float>(c.fp32_contents(), "fp32_contents", out);
    case DataType::kFp64:
      return Convert<double>(c.fp64_contents(), "fp64_contents", out);
    case DataType::kBytes: {
      TypedConversion result;
      result.field = "bytes_contents";
      result.count = c.bytes_contents_size();
      size_t total = out.size();
      for (const auto& s : c.bytes_contents()) {
        if (s.size() > std::numeric_limits<uint32_t>::max()) {
          result.error = TypedConversion::Error::kElementTooLong;
          return result;
        }
        total += kBytesLengthPrefix + s.size();
      }
      out.reserve(total);
      for (const auto& s : c.bytes_contents()) AppendBytesElement(out, s);
      return result;
    }
    case DataType::kFp16:
    case DataType::kBf16: {
      TypedConversion result;
      result.error = TypedConversion::Error::kNoTypedField;
      return result;
    }
    case DataType::kInvalid:
      break;
  }
  TypedConversion result;
  result.error = TypedConversion::Error::kInvalidType;
  return result;
}

}  // namespace sluice::wire
