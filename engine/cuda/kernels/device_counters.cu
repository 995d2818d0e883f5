#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels/device_counters.cuh"

namespace sluice::engine::cuda {
namespace {

constexpr int kThreads = 256;

// One block-stride pass over the outputs; thread 0 of block 0 also bumps the batch counters, so
// a batch costs one launch whatever its size.
__global__ void CountBatchKernel(DeviceCounters* counters, int items, int bucket,
                                 const float* outputs, int64_t output_count,
                                 const int32_t* ragged_counts) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  unsigned long long non_finite = 0;
  for (int64_t i = start; i < output_count; i += stride) {
    non_finite += isfinite(outputs[i]) ? 0 : 1;
  }
  if (non_finite > 0) atomicAdd(&counters->non_finite_outputs, non_finite);
  if (start == 0) {
    atomicAdd(&counters->batches, 1ULL);
    atomicAdd(&counters->items, static_cast<unsigned long long>(items));
    atomicAdd(&counters->bucket_batches[bucket], 1ULL);
    if (ragged_counts != nullptr) {
      atomicAdd(&counters->sequences, static_cast<unsigned long long>(ragged_counts[0]));
      atomicAdd(&counters->tokens, static_cast<unsigned long long>(ragged_counts[1]));
    }
  }
}

void CountBatch(DeviceCounters* counters, int items, int bucket, const float* outputs,
                int64_t output_count, cudaStream_t stream, const int32_t* ragged_counts) {
  // No outputs to scan (a model that does not count non-finite values): one block bumps the
  // batch counters; the grid is sized from what the kernel actually reads, never from a count
  // it ignores.
  const int64_t scanned = outputs == nullptr ? 0 : output_count;
  const int64_t wanted = (scanned + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < 1 ? 1 : (wanted > 1024 ? 1024 : wanted));
  CountBatchKernel<<<blocks, kThreads, 0, stream>>>(counters, items, bucket, outputs, scanned,
                                                    ragged_counts);
}

__global__ void NeverRunsKernel() {}

}  // namespace

absl::Status LaunchInvalidKernelForTest(cudaStream_t stream) {
  NeverRunsKernel<<<1, 0, 0, stream>>>();
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::InternalError("a launch with zero threads unexpectedly succeeded");
}

absl::Status LaunchCountBatch(DeviceCounters* counters, int items, int bucket, const float* outputs,
                              int64_t output_count, cudaStream_t stream,
                              const int32_t* ragged_counts) {
  if (bucket < 0 || bucket >= DeviceCounters::kMaxBuckets) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket ", bucket, " outside [0, ", DeviceCounters::kMaxBuckets, ")"));
  }
  CountBatch(counters, items, bucket, outputs, output_count, stream, ragged_counts);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace sluice::engine::cuda
