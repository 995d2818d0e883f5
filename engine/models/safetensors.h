#pragma once

// Reading and writing safetensors files, the weights format PyTorch users save with
// `safetensors.torch.save_file(model.state_dict(), path)`:
//
//   8 bytes   N: the length of the header, unsigned 64-bit little-endian
//   N bytes   the header: a UTF-8 JSON object mapping each tensor name to
//             {"dtype": "F32", "shape": [512, 784], "data_offsets": [begin, end]},
//             plus optionally "__metadata__": {string: string}
//   the rest  the data section: each tensor's bytes, row-major little-endian, at [begin, end)
//             relative to the start of the data section
//
// The reader validates the whole header before handing out any tensor: the length fits in the
// file, the JSON is one object without repeated names, every dtype is known, every shape is
// non-negative, every [begin, end) lies inside the data section and holds exactly
// product(shape) x element size bytes (overflow-checked), and no two tensors overlap. Bytes that no
// tensor covers (the spec forbids them, no writer leaves them) are tolerated: they are never read.

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/tensor.h"

namespace sluice::engine::models {

// An open, validated safetensors file. The file is mapped read-only; the tensors' `data` spans
// point into the mapping and stay valid for the life of this object (moving it keeps them valid).
// The bytes carry no alignment promise: copy them (ToFloat32) rather than casting.
// The file must not be truncated while it is open (the mapping would fault, as with any mmap).
// Immutable after Open: safe to read from several threads.
class SafetensorsFile {
 public:
  // Opens and validates `path`. NotFound if it does not exist; InvalidArgument for anything else
  // wrong with it, the message naming the file, the tensor (where one is at fault) and the reason,
  // e.g. "safetensors file 'm/1/model.safetensors': tensor '0.weight': data_offsets [0, 4096] end
  // beyond the data section (2048 bytes)".
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  // Every tensor, in the order of its data in the file.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // The tensor called `name`, or null (borrowed from this file).
  const TensorView* Find(absl::string_view name) const;
  // The "__metadata__" entries (empty if the header has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  struct Mapping;
  SafetensorsFile(std::string path, std::unique_ptr<Mapping> mapping);
  // Validates the mapped bytes and fills tensors_ and metadata_.
  absl::Status ParseMapped();

  std::string path_;
  std::unique_ptr<Mapping> mapping_;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// The safetensors dtype name of `type` ("F32", "BF16", "I64", "BOOL", ...), or "" for types the
// format has no name for (BYTES, INVALID).
absl::string_view SafetensorsDtypeName(DataType type);

// The values of a floating-point tensor (F32, F16, BF16 or F64) as FP32, in row-major order.
// F16/BF16 convert exactly; F64 rounds to nearest. InvalidArgument naming the tensor for any other
// dtype, or if the byte size does not match the shape.
absl::StatusOr<std::vector<float>> ToFloat32(const TensorView& tensor);

// The bytes of a safetensors file holding `tensors` (their data in the order given) and
// `metadata`. The header is compact JSON with keys in sorted order, padded with spaces to a
// multiple of 8 bytes (as the reference writer does) so the data section starts 8-byte aligned.
// The same arguments give the same bytes on every machine. InvalidArgument for a repeated or empty
// name, the name "__metadata__", a dtype without a safetensors name, or a data size that does not
// match the shape.
absl::StatusOr<std::string> SerializeSafetensors(
    std::span<const TensorView> tensors, const std::map<std::string, std::string>& metadata = {});

// SerializeSafetensors, written to `path` (replaced if it exists). Errors as SerializeSafetensors,
// or InvalidArgument naming the path when it cannot be written.
absl::Status WriteSafetensorsFile(const std::string& path, std::span<const TensorView> tensors,
                                  const std::map<std::string, std::string>& metadata = {});

}  // namespace sluice::engine::models
