#pragma once

// Pure helpers that turn typed values into KServe v2 request tensors and response tensors back into
// typed values (the codec). Their JSON form is client/tensor_json.h, random inputs for load and
// smoke tests client/random_input.h; the tensor rules themselves are common/wire/. No I/O, no
// threads, no gRPC: every function here is a plain function of its arguments and is safe to call
// from any thread.
//
// Wire conventions (the same as Triton's and the server's):
//   * Raw tensor bytes are the elements packed little-endian in row-major order. BOOL is one byte
//     (0 or 1) per element; FP16 and BF16 are the 16-bit patterns.
//   * A BYTES element is a 4-byte little-endian length followed by that many bytes; a BYTES tensor
//     is its elements one after another.
//   * A request carries its inputs either all in `raw_input_contents` (one entry per input, in
//     input order) or all in typed `contents`, never a mix. These helpers build raw requests.
//   * The server answers with `raw_output_contents`, one entry per output, in output order.

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/wire/float16.h"
#include "common/wire/shape.h"
#include "proto/grpc_service.pb.h"

namespace sluice::client {

static_assert(std::endian::native == std::endian::little,
              "raw tensor bytes are little-endian; this code copies host values as they are");

// ---- Data types -------------------------------------------------------------------------------

// Size in bytes of one element of `datatype`, a KServe v2 name ("BOOL", "UINT8".."UINT64",
// "INT8".."INT64", "FP16", "BF16", "FP32", "FP64", "BYTES"). Returns 0 for "BYTES" (variable
// length) and InvalidArgument for any other name.
absl::StatusOr<int64_t> DataTypeSize(absl::string_view datatype);

// Number of elements of a tensor of `shape` (1 for rank 0). InvalidArgument if a dimension is
// negative (a -1 "any size" dimension must be made concrete first) or the count overflows int64.
// The wire rule (common/wire/shape.h).
using wire::ElementCount;

// The KServe v2 datatype name of a C++ element type, e.g. DataTypeName<float>() == "FP32".
// Defined for int8_t..int64_t, uint8_t..uint64_t, float and double. (BOOL, FP16, BF16 and BYTES
// have no unambiguous C++ type: build those with AddRawInput / AddBytesInput.)
template <typename T>
constexpr absl::string_view DataTypeName() {
  if constexpr (std::is_same_v<T, int8_t>) {
    return "INT8";
  } else if constexpr (std::is_same_v<T, int16_t>) {
    return "INT16";
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return "INT32";
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return "INT64";
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    return "UINT8";
  } else if constexpr (std::is_same_v<T, uint16_t>) {
    return "UINT16";
  } else if constexpr (std::is_same_v<T, uint32_t>) {
    return "UINT32";
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    return "UINT64";
  } else if constexpr (std::is_same_v<T, float>) {
    return "FP32";
  } else if constexpr (std::is_same_v<T, double>) {
    return "FP64";
  } else {
    static_assert(sizeof(T) == 0, "no KServe v2 datatype for this C++ type");
  }
}

// IEEE binary16 and bfloat16 conversions (round to nearest even; NaN stays NaN): the wire
// rules' one implementation (common/wire/float16.h), under the client's names.
using wire::BFloat16ToFloat;
using wire::FloatToBFloat16;
using wire::FloatToHalf;
using wire::HalfToFloat;

// ---- Raw bytes --------------------------------------------------------------------------------

// The raw little-endian bytes of `values`.
template <typename T>
std::string ToRawBytes(absl::Span<const T> values) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>,
                "ToRawBytes takes numbers; pack BOOL as uint8_t 0/1");
  std::string raw(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(raw.data(), values.data(), raw.size());
  return raw;
}

// The values in `raw`, read as packed little-endian T. InvalidArgument if raw.size() is not a
// multiple of sizeof(T).
template <typename T>
absl::StatusOr<std::vector<T>> FromRawBytes(absl::string_view raw) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>);
  if (raw.size() % sizeof(T) != 0) {
    return absl::InvalidArgumentError("raw tensor size is not a multiple of the element size");
  }
  std::vector<T> values(raw.size() / sizeof(T));
  if (!raw.empty()) std::memcpy(values.data(), raw.data(), raw.size());
  return values;
}

// BYTES tensors: each element as a 4-byte little-endian length, then its bytes.
// REQUIRES: every element is shorter than 4 GiB.
std::string SerializeBytesElements(absl::Span<const std::string> elements);
// The inverse; InvalidArgument if `raw` ends inside a length prefix or an element.
absl::StatusOr<std::vector<std::string>> ParseBytesElements(absl::string_view raw);

// ---- Building requests ------------------------------------------------------------------------

// Appends input `name` to `request` with `raw` as its raw_input_contents entry. Checks that
// `datatype` is known, `shape` has no negative dimension and `raw` holds exactly the tensor
// (element count x element size bytes; for BYTES, exactly ElementCount(shape) well-formed
// elements). Returns InvalidArgument naming the tensor otherwise, and FailedPrecondition if
// `request` already carries typed `contents` inputs (a request is all raw or all typed) or
// already has an input called `name`. On error `request` is unchanged.
absl::Status AddRawInput(inference::ModelInferRequest& request, absl::string_view name,
                         absl::string_view datatype, absl::Span<const int64_t> shape,
                         std::string raw);

// AddRawInput for numeric values; the datatype is DataTypeName<T>().
// Example: AddInput(request, "INPUT0", {1, 16}, std::vector<int32_t>(16, 1)).
template <typename T>
absl::Status AddInput(inference::ModelInferRequest& request, absl::string_view name,
                      absl::Span<const int64_t> shape, absl::Span<const T> values) {
  return AddRawInput(request, name, DataTypeName<T>(), shape, ToRawBytes<T>(values));
}
template <typename T>
absl::Status AddInput(inference::ModelInferRequest& request, absl::string_view name,
                      absl::Span<const int64_t> shape, const std::vector<T>& values) {
  return AddInput<T>(request, name, shape, absl::Span<const T>(values));
}

// AddRawInput for a BYTES tensor made of `elements`.
absl::Status AddBytesInput(inference::ModelInferRequest& request, absl::string_view name,
                           absl::Span<const int64_t> shape, absl::Span<const std::string> elements);

// Asks the server for output `name` only (a request that names no output gets all of them).
void AddRequestedOutput(inference::ModelInferRequest& request, absl::string_view name);

// ---- Decoding responses -----------------------------------------------------------------------

// One output of a response, with its bytes in raw (little-endian) form whichever way the server
// sent them.
struct OutputTensor {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  std::string raw;

  // The elements as T. InvalidArgument unless datatype == DataTypeName<T>().
  template <typename T>
  absl::StatusOr<std::vector<T>> As() const {
    if (datatype != DataTypeName<T>()) {
      return absl::InvalidArgumentError("output '" + name + "' is " + datatype + ", not " +
                                        std::string(DataTypeName<T>()));
    }
    return FromRawBytes<T>(raw);
  }
};

// Output `name` of `response`. Takes raw_output_contents when the response has them (one entry
// per output, in order) and converts typed `contents` otherwise. Checks the byte size against the
// shape and datatype. NotFound if there is no such output, InvalidArgument if it is malformed.
absl::StatusOr<OutputTensor> DecodeOutput(const inference::ModelInferResponse& response,
                                          absl::string_view name);

// Every output of `response`, in order; errors as DecodeOutput.
absl::StatusOr<std::vector<OutputTensor>> DecodeOutputs(
    const inference::ModelInferResponse& response);

}  // namespace sluice::client
