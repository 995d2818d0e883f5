#include "engine/core/tensor.h"

#include "absl/strings/str_cat.h"
#include "common/wire/bytes_elements.h"
#include "engine/core/device_memory.h"

namespace sluice::engine {

int DeviceBytes::device() const { return memory->device(); }

const void* DeviceBytes::address() const {
  return static_cast<const std::byte*>(memory->device_address()) + offset;
}

absl::Status ValidateDeviceBytes(absl::string_view tensor_name, const DeviceBytes& bytes) {
  if (bytes.memory == nullptr || bytes.keepalive == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", tensor_name, "' is in device memory without the mapping that holds it"));
  }
  const uint64_t limit = bytes.memory->byte_size();
  // offset <= limit first, so that limit - offset cannot wrap.
  if (bytes.offset > limit || bytes.byte_size > limit - bytes.offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", tensor_name, "': device memory range at offset ", bytes.offset,
                     " of ", bytes.byte_size, " bytes runs past its mapping's ", limit, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status ValidateBytesElements(absl::string_view tensor_name, std::span<const std::byte> data,
                                   int64_t elements) {
  wire::BytesElementReader reader(data);
  absl::string_view element;
  while (reader.index() < elements && reader.Next(element)) {
  }
  if (reader.index() < elements) {
    switch (reader.error()) {
      case wire::BytesElementReader::Error::kTruncatedElement:
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", tensor_name, "': BYTES element ", reader.index(), " declares ",
            reader.declared_length(), " bytes but only ", reader.remaining(), " remain"));
      case wire::BytesElementReader::Error::kTruncatedLength:
      case wire::BytesElementReader::Error::kNone:  // the data ended before `elements`
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", tensor_name, "': BYTES element ", reader.index(), " of ", elements,
            " has no 4-byte length prefix (", data.size(), " bytes in all)"));
    }
  }
  if (reader.left() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("input '", tensor_name, "': ", reader.left(),
                                                   " bytes left over after ", elements,
                                                   " BYTES elements"));
  }
  return absl::OkStatus();
}

}  // namespace sluice::engine
