#include "engine/cuda/cuda_handles.h"

#include "engine/cuda/cuda_check.h"

namespace sluice::engine::cuda {

ScopedDevice::ScopedDevice(int device) {
  CUDA_LOG_IF_ERROR(cudaGetDevice(&previous_));
  if (previous_ != device) CUDA_LOG_IF_ERROR(cudaSetDevice(device));
}

ScopedDevice::~ScopedDevice() {
  if (previous_ >= 0) CUDA_LOG_IF_ERROR(cudaSetDevice(previous_));
}

absl::StatusOr<CudaStream> CudaStream::Create(int device) {
  ScopedDevice scoped(device);
  cudaStream_t stream = nullptr;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return CudaStream(device, stream);
}

void CudaStream::Deleter::operator()(cudaStream_t stream) const {
  ScopedDevice scoped(device);
  CUDA_LOG_IF_ERROR(cudaStreamDestroy(stream));
}

absl::StatusOr<CudaEvent> CudaEvent::Create(int device, bool timing) {
  ScopedDevice scoped(device);
  cudaEvent_t event = nullptr;
  CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming));
  return CudaEvent(device, event);
}

void CudaEvent::Deleter::operator()(cudaEvent_t event) const {
  ScopedDevice scoped(device);
  CUDA_LOG_IF_ERROR(cudaEventDestroy(event));
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Create(int device, size_t bytes) {
  ScopedDevice scoped(device);
  void* data = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMalloc(&data, bytes));
  return DeviceBuffer(device, data, bytes);
}

void DeviceBuffer::Deleter::operator()(void* data) const {
  ScopedDevice scoped(device);
  CUDA_LOG_IF_ERROR(cudaFree(data));
}

absl::StatusOr<PinnedHostBuffer> PinnedHostBuffer::Create(size_t bytes) {
  void* data = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMallocHost(&data, bytes));
  return PinnedHostBuffer(data, bytes);
}

void PinnedHostBuffer::Deleter::operator()(void* data) const {
  CUDA_LOG_IF_ERROR(cudaFreeHost(data));
}

}  // namespace sluice::engine::cuda
