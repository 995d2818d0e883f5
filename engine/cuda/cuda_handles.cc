#include "engine/cuda/cuda_handles.h"

#include "engine/cuda/cuda_check.h"

namespace sluice::engine::cuda {

ScopedDevice::ScopedDevice(int device, Restore restore) {
  int current = -1;
  CUDA_LOG_IF_ERROR(cudaGetDevice(&current));
  if (current != device) CUDA_LOG_IF_ERROR(cudaSetDevice(device));
  // Nothing to restore when nothing changed, or when the thread keeps `device` (kNo).
  previous_ = restore == Restore::kYes && current != device ? current : -1;
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

absl::StatusOr<CudaEvent> CudaEvent::CreateBlocking(int device, bool timing) {
  ScopedDevice scoped(device);
  cudaEvent_t event = nullptr;
  const unsigned flags = cudaEventBlockingSync | (timing ? 0u : cudaEventDisableTiming);
  CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, flags));
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

namespace sluice::engine::cuda {

absl::Status CudaGraphExec::BeginCapture(cudaStream_t stream) {
  CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  return absl::OkStatus();
}

absl::StatusOr<CudaGraphExec> CudaGraphExec::EndCapture(cudaStream_t stream,
                                                        absl::Status enqueued) {
  cudaGraph_t graph = nullptr;
  // Always end the capture, even after a failed enqueue: the stream must leave capture mode.
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, void (*)(cudaGraph_t)> owner(
      graph, [](cudaGraph_t g) {
        if (g != nullptr) CUDA_LOG_IF_ERROR(cudaGraphDestroy(g));
      });
  if (!enqueued.ok()) return enqueued;
  CUDA_RETURN_IF_ERROR(ended);
  cudaGraphExec_t exec = nullptr;
  CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&exec, graph, 0));
  return CudaGraphExec(exec);
}

absl::Status CudaGraphExec::Launch(cudaStream_t stream) const {
  CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_.get(), stream));
  return absl::OkStatus();
}

void CudaGraphExec::Deleter::operator()(cudaGraphExec_t exec) const {
  CUDA_LOG_IF_ERROR(cudaGraphExecDestroy(exec));
}

}  // namespace sluice::engine::cuda
