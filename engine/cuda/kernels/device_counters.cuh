#pragma once

// Device-resident counters that the end of every batch updates (ARCHITECTURE §2 rule 5), read by
// the metrics collector on its own stream at an interval; never read per request.
// This header holds no device code, so host C++ includes it.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace sluice::engine::cuda {

// Laid out in device memory; the collector copies the whole struct to pinned memory.
struct DeviceCounters {
  static constexpr int kMaxBuckets = 16;
  unsigned long long batches;
  unsigned long long items;
  unsigned long long bucket_batches[kMaxBuckets];
  // Output elements that were NaN or infinite.
  unsigned long long non_finite_outputs;
  // Ragged (sequence) models only: real sequences and tokens run, as the device saw them (read
  // from the batch's own counts in device memory, after its input copy).
  unsigned long long sequences;
  unsigned long long tokens;
};

// Adds one batch of `items` in `bucket` to `counters`, and counts the non-finite values among the
// first `output_count` floats of `outputs` (nullptr: none). `ragged_counts` (device memory, or
// null for a model that is not ragged) holds the batch's real sequence and token counts, which
// are added to `sequences` and `tokens`. Enqueued on `stream`; returns at once.
// InvalidArgument for a bucket outside [0, kMaxBuckets); INTERNAL if the launch fails.
absl::Status LaunchCountBatch(DeviceCounters* counters, int items, int bucket, const float* outputs,
                              int64_t output_count, cudaStream_t stream,
                              const int32_t* ragged_counts = nullptr);

// Test-only fault injection: launches a kernel with an invalid configuration (zero threads), so
// the launch fails exactly as a real launch error would. Always returns INTERNAL naming the call.
absl::Status LaunchInvalidKernelForTest(cudaStream_t stream);

}  // namespace sluice::engine::cuda
