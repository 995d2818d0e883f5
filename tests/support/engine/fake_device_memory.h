#pragma once

// FakeDeviceMemory: an ImportedDeviceMemory whose "device memory" is a host vector, for the CPU
// tests of inputs in device memory (engine::DeviceBytes): what the CPU executor copies and on
// which thread, what a copy error does, and when the mapping is released relative to the batch
// that read it (on_release runs in the destructor: the moment the last keepalive went).
// Test-only; header-only. Thread-safe.

#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/device_memory.h"
#include "engine/core/tensor.h"

namespace sluice::engine::testing {

class FakeDeviceMemory final : public ImportedDeviceMemory {
 public:
  // `on_release` runs when the mapping is destroyed (its last keepalive released), with the
  // mapping still whole.
  explicit FakeDeviceMemory(std::vector<std::byte> bytes,
                            std::function<void(const FakeDeviceMemory&)> on_release = {},
                            int device = 0)
      : bytes_(std::move(bytes)), on_release_(std::move(on_release)), device_(device) {}
  ~FakeDeviceMemory() override {
    if (on_release_) on_release_(*this);
  }

  // DeviceBytes for [offset, offset + size) of `memory`, which it keeps alive.
  static DeviceBytes Bytes(const std::shared_ptr<FakeDeviceMemory>& memory, uint64_t offset,
                           uint64_t size) {
    return DeviceBytes{
        .memory = memory.get(), .offset = offset, .byte_size = size, .keepalive = memory};
  }

  int device() const override { return device_; }
  uint64_t byte_size() const override { return bytes_.size(); }
  const void* device_address() const override { return bytes_.data(); }
  absl::Status CopyToHost(uint64_t offset, std::span<std::byte> out) const override {
    std::lock_guard<std::mutex> lock(mu_);
    copy_threads_.push_back(std::this_thread::get_id());
    if (!copy_error_.ok()) return copy_error_;
    if (!out.empty()) std::memcpy(out.data(), bytes_.data() + offset, out.size());
    return absl::OkStatus();
  }
  absl::Status CopyFromHost(uint64_t offset, std::span<const std::byte> data) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!data.empty()) std::memcpy(bytes_.data() + offset, data.data(), data.size());
    return absl::OkStatus();
  }

  // Every later CopyToHost fails with `error`.
  void FailCopiesWith(absl::Status error) {
    std::lock_guard<std::mutex> lock(mu_);
    copy_error_ = std::move(error);
  }
  // The threads CopyToHost ran on, in order.
  std::vector<std::thread::id> copy_threads() const {
    std::lock_guard<std::mutex> lock(mu_);
    return copy_threads_;
  }

 private:
  std::vector<std::byte> bytes_;
  const std::function<void(const FakeDeviceMemory&)> on_release_;
  const int device_;
  mutable std::mutex mu_;
  mutable std::vector<std::thread::id> copy_threads_;
  absl::Status copy_error_;
};

}  // namespace sluice::engine::testing
