#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels/add_sub.cuh"

namespace sluice::engine::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void AddSubKernel(const int32_t* a, const int32_t* b, int32_t* sum, int32_t* difference,
                             int64_t count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  // Unsigned arithmetic wraps without undefined behaviour, matching the CPU backend.
  const uint32_t x = static_cast<uint32_t>(a[i]);
  const uint32_t y = static_cast<uint32_t>(b[i]);
  sum[i] = static_cast<int32_t>(x + y);
  difference[i] = static_cast<int32_t>(x - y);
}

void AddSub(const int32_t* a, const int32_t* b, int32_t* sum, int32_t* difference, int64_t count,
            cudaStream_t stream) {
  if (count == 0) return;
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  AddSubKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(a, b, sum, difference,
                                                                       count);
}

}  // namespace

absl::Status LaunchAddSubInt32(const int32_t* a, const int32_t* b, int32_t* sum,
                               int32_t* difference, int64_t count, cudaStream_t stream) {
  AddSub(a, b, sum, difference, count, stream);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace sluice::engine::cuda
