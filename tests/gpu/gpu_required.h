#pragma once

// Skip or fail: a GPU test without a usable GPU skips (with the reason) on a machine that has
// none, and fails where a GPU is required: SLUICE_GPU_TESTS_REQUIRED=1 in the environment
// (scripts/gpu-check.sh sets it), so that a GPU run whose tests all skipped cannot pass.

#include <cstdlib>
#include <cstring>

#include "engine/cuda/device_info.h"
#include "gtest/gtest.h"

namespace sluice::engine::cuda {

inline bool GpuTestsRequired() {
  const char* value = std::getenv("SLUICE_GPU_TESTS_REQUIRED");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

}  // namespace sluice::engine::cuda

// In a test's SetUp (or body): returns from it with a skip, or with a failure when required.
#define SLUICE_SKIP_WITHOUT_GPU()                                          \
  do {                                                                     \
    auto sluice_devices_ = ::sluice::engine::cuda::ListDevices();          \
    if (!sluice_devices_.ok()) {                                           \
      if (::sluice::engine::cuda::GpuTestsRequired()) {                    \
        GTEST_FAIL() << "no usable GPU, and SLUICE_GPU_TESTS_REQUIRED=1: " \
                     << sluice_devices_.status();                          \
      }                                                                    \
      GTEST_SKIP() << "no usable GPU: " << sluice_devices_.status();       \
    }                                                                      \
  } while (false)
