#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels/dense_epilogue.cuh"

namespace sluice::engine::cuda {
namespace {

constexpr int kThreads = 256;

int BlocksFor(int64_t count) {
  const int64_t wanted = (count + kThreads - 1) / kThreads;
  return static_cast<int>(wanted < 1 ? 1 : (wanted > 4096 ? 4096 : wanted));
}

__device__ float ToFloat(float v) { return v; }
__device__ float ToFloat(__half v) { return __half2float(v); }
__device__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ T FromFloat(float v);
template <>
__device__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// The same formulas as engine/models/dense.cc, in FP32.
__device__ float Activate(float x, DeviceActivation activation) {
  switch (activation) {
    case DeviceActivation::kNone:
      return x;
    case DeviceActivation::kRelu:
      return x > 0.f ? x : 0.f;
    case DeviceActivation::kGelu:
      return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case DeviceActivation::kGeluTanh: {
      const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.f + tanhf(inner));
    }
    case DeviceActivation::kSilu:
      return x / (1.f + expf(-x));
    case DeviceActivation::kSigmoid:
      return 1.f / (1.f + expf(-x));
    case DeviceActivation::kTanh:
      return tanhf(x);
  }
  return x;
}

template <typename T>
__global__ void ConvertKernel(const float* in, T* out, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = FromFloat<T>(in[i]);
  }
}

template <typename T>
__global__ void BiasActivationKernel(T* values, const T* bias, int rows, int columns,
                                     DeviceActivation activation) {
  const int64_t count = static_cast<int64_t>(rows) * columns;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float x = ToFloat(values[i]);
    if (bias != nullptr) x += ToFloat(bias[i % columns]);
    values[i] = FromFloat<T>(Activate(x, activation));
  }
}

// One block per row; a block-wide max and sum through shared memory.
__global__ void SoftmaxRowsKernel(float* values, int columns) {
  __shared__ float reduce[kThreads];
  float* row = values + static_cast<int64_t>(blockIdx.x) * columns;
  float local_max = -INFINITY;
  for (int c = threadIdx.x; c < columns; c += blockDim.x) local_max = fmaxf(local_max, row[c]);
  reduce[threadIdx.x] = local_max;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step /= 2) {
    if (threadIdx.x < step) {
      reduce[threadIdx.x] = fmaxf(reduce[threadIdx.x], reduce[threadIdx.x + step]);
    }
    __syncthreads();
  }
  const float row_max = reduce[0];
  __syncthreads();
  float local_sum = 0.f;
  for (int c = threadIdx.x; c < columns; c += blockDim.x) {
    const float e = expf(row[c] - row_max);
    row[c] = e;
    local_sum += e;
  }
  reduce[threadIdx.x] = local_sum;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step /= 2) {
    if (threadIdx.x < step) reduce[threadIdx.x] += reduce[threadIdx.x + step];
    __syncthreads();
  }
  const float inverse = 1.f / reduce[0];
  for (int c = threadIdx.x; c < columns; c += blockDim.x) row[c] *= inverse;
}

template <typename T>
void BiasActivation(void* values, const void* bias, int rows, int columns,
                    DeviceActivation activation, cudaStream_t stream) {
  BiasActivationKernel<T><<<BlocksFor(static_cast<int64_t>(rows) * columns), kThreads, 0, stream>>>(
      static_cast<T*>(values), static_cast<const T*>(bias), rows, columns, activation);
}

}  // namespace

absl::Status LaunchConvertFromFloat(const float* in, void* out, ElementType type, int64_t count,
                                    cudaStream_t stream) {
  switch (type) {
    case ElementType::kFp32:
      ConvertKernel<float>
          <<<BlocksFor(count), kThreads, 0, stream>>>(in, static_cast<float*>(out), count);
      break;
    case ElementType::kFp16:
      ConvertKernel<__half>
          <<<BlocksFor(count), kThreads, 0, stream>>>(in, static_cast<__half*>(out), count);
      break;
    case ElementType::kBf16:
      ConvertKernel<__nv_bfloat16>
          <<<BlocksFor(count), kThreads, 0, stream>>>(in, static_cast<__nv_bfloat16*>(out), count);
      break;
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchBiasActivation(void* values, const void* bias, ElementType type, int rows,
                                  int columns, DeviceActivation activation, cudaStream_t stream) {
  switch (type) {
    case ElementType::kFp32:
      BiasActivation<float>(values, bias, rows, columns, activation, stream);
      break;
    case ElementType::kFp16:
      BiasActivation<__half>(values, bias, rows, columns, activation, stream);
      break;
    case ElementType::kBf16:
      BiasActivation<__nv_bfloat16>(values, bias, rows, columns, activation, stream);
      break;
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchSoftmaxRows(float* values, int rows, int columns, cudaStream_t stream) {
  if (rows > 0) SoftmaxRowsKernel<<<rows, kThreads, 0, stream>>>(values, columns);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace sluice::engine::cuda
