#pragma once

// Move-only owners of CUDA handles (STYLE rule 12): a stream, an event, device and pinned host
// buffers. Each is created by a static Create() returning StatusOr, remembers its device, and
// releases its handle in the destructor (errors there are logged, never thrown).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <type_traits>

#include "absl/status/statusor.h"

namespace sluice::engine::cuda {

// Makes `device` current for the guard's lifetime, then restores the previous one.
class ScopedDevice {
 public:
  enum class Restore { kYes, kNo };
  // Makes `device` current. kYes restores the previous one at scope end. kNo leaves `device`
  // current: for threads whose every CUDA call is preceded by its own ScopedDevice (the
  // executor's completion thread, the model's batcher thread, the stats collector). Restoring
  // there buys nothing, and on a fresh thread (current device 0 by default) it would make the
  // thread create a context on GPU 0 (cudaSetDevice initializes the device's primary context
  // since CUDA 12) while it serves another GPU.
  explicit ScopedDevice(int device, Restore restore = Restore::kYes);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = -1;
};

class CudaStream {
 public:
  // A non-blocking stream (it does not synchronize with the legacy default stream).
  static absl::StatusOr<CudaStream> Create(int device);
  cudaStream_t get() const { return stream_.get(); }
  int device() const { return device_; }

 private:
  struct Deleter {
    int device;
    void operator()(cudaStream_t stream) const;
  };
  CudaStream(int device, cudaStream_t stream) : device_(device), stream_(stream, {device}) {}
  int device_;
  std::unique_ptr<std::remove_pointer_t<cudaStream_t>, Deleter> stream_;
};

class CudaEvent {
 public:
  // `timing`: the event records timestamps (for cudaEventElapsedTime); otherwise it is created
  // with cudaEventDisableTiming, the cheapest kind for pure ordering.
  static absl::StatusOr<CudaEvent> Create(int device, bool timing);
  // As Create(); cudaEventSynchronize on it blocks the calling thread (cudaEventBlockingSync)
  // instead of spinning a core until the event fires. For the events a thread waits on.
  static absl::StatusOr<CudaEvent> CreateBlocking(int device, bool timing);
  cudaEvent_t get() const { return event_.get(); }

 private:
  struct Deleter {
    int device;
    void operator()(cudaEvent_t event) const;
  };
  CudaEvent(int device, cudaEvent_t event) : event_(event, {device}) {}
  std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, Deleter> event_;
};

// `bytes` of device memory.
class DeviceBuffer {
 public:
  static absl::StatusOr<DeviceBuffer> Create(int device, size_t bytes);
  void* get() const { return data_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  struct Deleter {
    int device;
    void operator()(void* data) const;
  };
  DeviceBuffer(int device, void* data, size_t bytes) : data_(data, {device}), bytes_(bytes) {}
  std::unique_ptr<void, Deleter> data_;
  size_t bytes_;
};

// `bytes` of page-locked host memory: the staging area async copies need to really be async.
class PinnedHostBuffer {
 public:
  static absl::StatusOr<PinnedHostBuffer> Create(size_t bytes);
  void* get() const { return data_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  struct Deleter {
    void operator()(void* data) const;
  };
  PinnedHostBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}
  std::unique_ptr<void, Deleter> data_;
  size_t bytes_;
};

}  // namespace sluice::engine::cuda

namespace sluice::engine::cuda {

// An executable CUDA graph: what one stream capture recorded, instantiated for replay.
class CudaGraphExec {
 public:
  // Records everything `enqueue` puts on `stream` (capture mode thread-local, so other threads'
  // CUDA calls are not disturbed) and instantiates it. `enqueue` must only enqueue: no
  // synchronization, no allocation. Errors from `enqueue` or from capture are returned, and the
  // capture is ended either way.
  template <typename Enqueue>
  static absl::StatusOr<CudaGraphExec> Capture(cudaStream_t stream, Enqueue&& enqueue) {
    absl::Status begun = BeginCapture(stream);
    if (!begun.ok()) return begun;
    absl::Status enqueued = enqueue();
    return EndCapture(stream, enqueued);
  }
  // Enqueues one replay on `stream`.
  absl::Status Launch(cudaStream_t stream) const;
  cudaGraphExec_t get() const { return exec_.get(); }

 private:
  struct Deleter {
    void operator()(cudaGraphExec_t exec) const;
  };
  explicit CudaGraphExec(cudaGraphExec_t exec) : exec_(exec) {}
  static absl::Status BeginCapture(cudaStream_t stream);
  static absl::StatusOr<CudaGraphExec> EndCapture(cudaStream_t stream, absl::Status enqueued);
  std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, Deleter> exec_;
};

}  // namespace sluice::engine::cuda
