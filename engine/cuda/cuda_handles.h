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
  explicit ScopedDevice(int device);
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
