#include "engine/cuda/ipc_memory.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/cuda_handles.h"

namespace sluice::engine::cuda {
namespace {

// Owns the opened IPC mapping and a stream of its own for output writes. Input copies to host
// run on the calling thread's per-thread default stream instead: each CPU executor thread then
// waits for its own copy only, never queued behind another thread's copy on a shared stream.
class IpcMemory final : public ImportedDeviceMemory {
 public:
  IpcMemory(int device, void* base, uint64_t byte_size, CudaStream stream)
      : device_(device), base_(base), byte_size_(byte_size), stream_(std::move(stream)) {}
  ~IpcMemory() override {
    ScopedDevice scoped(device_);
    CUDA_LOG_IF_ERROR(cudaIpcCloseMemHandle(base_));
  }

  int device() const override { return device_; }
  uint64_t byte_size() const override { return byte_size_; }
  const void* device_address() const override { return base_; }

  absl::Status CopyToHost(uint64_t offset, std::span<std::byte> out) const override {
    ScopedDevice scoped(device_);
    // cudaStreamPerThread: this thread's own stream (non-blocking with respect to the
    // executors' streams, which are all created cudaStreamNonBlocking).
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.data(), static_cast<const char*>(base_) + offset,
                                         out.size(), cudaMemcpyDeviceToHost, cudaStreamPerThread));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cudaStreamPerThread));
    return absl::OkStatus();
  }

  absl::Status CopyFromHost(uint64_t offset, std::span<const std::byte> data) override {
    ScopedDevice scoped(device_);
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(static_cast<char*>(base_) + offset, data.data(),
                                         data.size(), cudaMemcpyHostToDevice, stream_.get()));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
    return absl::OkStatus();
  }

 private:
  const int device_;
  void* const base_;
  const uint64_t byte_size_;
  CudaStream stream_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ImportedDeviceMemory>> OpenIpcMemory(
    std::span<const std::byte> handle, int device, uint64_t byte_size) {
  if (handle.size() != sizeof(cudaIpcMemHandle_t)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a CUDA IPC handle is ", sizeof(cudaIpcMemHandle_t), " bytes, not ", handle.size()));
  }
  int count = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, " does not exist (this process sees ", count, ")"));
  }
  cudaIpcMemHandle_t ipc_handle;
  std::memcpy(&ipc_handle, handle.data(), sizeof(ipc_handle));
  absl::StatusOr<CudaStream> stream = CudaStream::Create(device);
  if (!stream.ok()) return stream.status();
  ScopedDevice scoped(device);
  void* base = nullptr;
  CUDA_RETURN_IF_ERROR(cudaIpcOpenMemHandle(&base, ipc_handle, cudaIpcMemLazyEnablePeerAccess));
  return std::make_unique<IpcMemory>(device, base, byte_size, *std::move(stream));
}

}  // namespace sluice::engine::cuda
