// GPU tests (CTest label `gpu`): run on a machine with an NVIDIA GPU (scripts/gpu-check.sh), skip
// with the reason everywhere else.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "engine/cuda/cuda_handles.h"
#include "engine/cuda/device_info.h"
#include "engine/cuda/kernels/add_sub.cuh"
#include "engine/cuda/kernels/device_counters.cuh"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_required.h"

namespace sluice::engine::cuda {
namespace {

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override { SLUICE_SKIP_WITHOUT_GPU(); }
};

TEST_F(CudaKernelsTest, AddSubMatchesTheCpuDefinition) {
  constexpr int64_t kCount = 1000;
  std::vector<int32_t> a(kCount), b(kCount);
  for (int64_t i = 0; i < kCount; ++i) {
    a[i] = static_cast<int32_t>(i * 2654435761u);
    b[i] = static_cast<int32_t>(i * 40503u + 7);
  }
  auto stream = CudaStream::Create(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  auto d = DeviceBuffer::Create(0, 4 * kCount * sizeof(int32_t));
  ASSERT_TRUE(d.ok()) << d.status();
  auto* base = static_cast<int32_t*>(d->get());
  ASSERT_EQ(cudaMemcpy(base, a.data(), kCount * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(base + kCount, b.data(), kCount * 4, cudaMemcpyHostToDevice), cudaSuccess);
  // cudaMemcpy from pageable memory may return before the data lands, and runs on the legacy
  // stream, which the non-blocking stream below does not wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_TRUE(LaunchAddSubInt32(base, base + kCount, base + 2 * kCount, base + 3 * kCount, kCount,
                                stream->get())
                  .ok());
  ASSERT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);
  std::vector<int32_t> sum(kCount), diff(kCount);
  ASSERT_EQ(cudaMemcpy(sum.data(), base + 2 * kCount, kCount * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(diff.data(), base + 3 * kCount, kCount * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (int64_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(sum[i],
              static_cast<int32_t>(static_cast<uint32_t>(a[i]) + static_cast<uint32_t>(b[i])));
    ASSERT_EQ(diff[i],
              static_cast<int32_t>(static_cast<uint32_t>(a[i]) - static_cast<uint32_t>(b[i])));
  }
}

TEST_F(CudaKernelsTest, CountersCountBatchesItemsAndNonFiniteOutputs) {
  auto stream = CudaStream::Create(0);
  ASSERT_TRUE(stream.ok());
  auto counters = DeviceBuffer::Create(0, sizeof(DeviceCounters));
  auto outputs = DeviceBuffer::Create(0, 4096 * sizeof(float));
  ASSERT_TRUE(counters.ok() && outputs.ok());
  ASSERT_EQ(cudaMemset(counters->get(), 0, sizeof(DeviceCounters)), cudaSuccess);
  std::vector<float> host(4096, 1.f);
  host[5] = 1.f / 0.f;
  host[4000] = 0.f / 0.f;
  ASSERT_EQ(cudaMemcpy(outputs->get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice),
            cudaSuccess);
  // The memset and the copy ran on the legacy stream: finish them before the non-blocking
  // stream's kernels read.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto* c = static_cast<DeviceCounters*>(counters->get());
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(LaunchCountBatch(c, 3, i % 2, static_cast<const float*>(outputs->get()), 4096,
                                 stream->get())
                    .ok());
  }
  EXPECT_FALSE(LaunchCountBatch(c, 1, DeviceCounters::kMaxBuckets, nullptr, 0, stream->get()).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);
  DeviceCounters result{};
  ASSERT_EQ(cudaMemcpy(&result, c, sizeof(result), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(result.batches, 10u);
  EXPECT_EQ(result.items, 30u);
  EXPECT_EQ(result.bucket_batches[0], 5u);
  EXPECT_EQ(result.bucket_batches[1], 5u);
  EXPECT_EQ(result.non_finite_outputs, 20u);
}

}  // namespace
}  // namespace sluice::engine::cuda
