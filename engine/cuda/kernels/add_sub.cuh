#pragma once

// The `simple` model on the GPU: sum = a + b, difference = a - b over int32 (wrapping, as on the
// CPU backend). Host-includable: no device code here.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace sluice::engine::cuda {

// Enqueues on `stream`; INTERNAL if the launch fails.
absl::Status LaunchAddSubInt32(const int32_t* a, const int32_t* b, int32_t* sum,
                               int32_t* difference, int64_t count, cudaStream_t stream);

}  // namespace sluice::engine::cuda
