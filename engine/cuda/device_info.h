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

// The visible devices; an error (naming the CUDA call and its message, e.g. "no CUDA-capable
// device is detected" or an insufficient driver) when there are none.
absl::StatusOr<std::vector<DeviceInfo>> ListDevices();

}  // namespace sluice::engine::cuda
