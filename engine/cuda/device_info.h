#pragma once

// Which CUDA devices this process can use, asked once at start-up (never on the request path).

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sluice::engine::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  size_t total_memory_bytes = 0;
};

// The visible devices. NotFound ("no GPU found (...)", CUDA's words in the parentheses) on a
// machine without a GPU: no device, or no NVIDIA driver loaded at all. Any other failure (e.g. a
// driver too old for a GPU that is there) is Internal, naming the CUDA call and its message.
absl::StatusOr<std::vector<DeviceInfo>> ListDevices();

}  // namespace sluice::engine::cuda
