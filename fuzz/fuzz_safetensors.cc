// Fuzz target: a safetensors file (8-byte header length, JSON header, data) through the reader's
// validation and, for each tensor it accepts, the conversion to float32 the mlp backend uses.

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/models/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The reader maps a file by path: an in-memory file under /proc/self/fd keeps the disk out.
  static const int fd = memfd_create("sluice-fuzz-safetensors", 0);
  if (fd < 0) return 0;
  if (ftruncate(fd, 0) != 0) return 0;
  size_t written = 0;
  while (written < size) {
    const ssize_t n = pwrite(fd, data + written, size - written, static_cast<off_t>(written));
    if (n <= 0) return 0;
    written += static_cast<size_t>(n);
  }
  auto file = sluice::engine::models::SafetensorsFile::Open("/proc/self/fd/" + std::to_string(fd));
  if (!file.ok()) return 0;
  for (const sluice::engine::TensorView& tensor : file->tensors()) {
    (void)sluice::engine::models::ToFloat32(tensor);
  }
  return 0;
}
