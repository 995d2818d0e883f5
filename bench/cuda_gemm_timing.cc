#include "bench/cuda_gemm_timing.h"

#include <algorithm>
#include <random>

#include "common/status_macros.h"
#include "engine/cuda/cublaslt_handles.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/cuda_handles.h"
#include "engine/cuda/element_upload.h"

namespace sluice::bench {

namespace cuda = engine::cuda;

namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;  // as the encoder's

// Fills `bytes` of `buffer` by repeating `block` (random values: never time on zeros, which can
// run faster than real data).
absl::Status Tile(const cuda::DeviceBuffer& block, size_t block_bytes, void* buffer, size_t bytes,
                  cudaStream_t stream) {
  for (size_t at = 0; at < bytes; at += block_bytes) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(static_cast<std::byte*>(buffer) + at, block.get(),
                                         std::min(block_bytes, bytes - at),
                                         cudaMemcpyDeviceToDevice, stream));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<GemmTiming>> TimeEncoderGemms(int device, cuda::ElementType type,
                                                         bool tf32, int hidden, int intermediate,
                                                         const std::vector<int64_t>& tokens,
                                                         int repetitions) {
  cuda::ScopedDevice scoped(device);
  ASSIGN_OR_RETURN(cuda::CublasLtHandle handle, cuda::CublasLtHandle::Create());
  ASSIGN_OR_RETURN(cuda::CudaStream stream, cuda::CudaStream::Create(device));
  ASSIGN_OR_RETURN(cuda::CudaEvent start, cuda::CudaEvent::Create(device, true));
  ASSIGN_OR_RETURN(cuda::CudaEvent stop, cuda::CudaEvent::Create(device, true));
  ASSIGN_OR_RETURN(cuda::DeviceBuffer workspace,
                   cuda::DeviceBuffer::Create(device, kWorkspaceBytes));
  const struct {
    const char* name;
    int in;
    int out;
  } shapes[] = {{"qkv", hidden, 3 * hidden},
                {"attention_output", hidden, hidden},
                {"intermediate", hidden, intermediate},
                {"output", intermediate, hidden}};
  const int64_t max_tokens = *std::max_element(tokens.begin(), tokens.end());
  const size_t widest = static_cast<size_t>(std::max(3 * hidden, intermediate));
  const size_t e = cuda::ElementBytes(type);
  const size_t activation_bytes = static_cast<size_t>(max_tokens) * widest * e;
  const size_t weight_bytes = widest * static_cast<size_t>(std::max(hidden, intermediate)) * e;
  std::vector<float> random(1 << 20);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  for (float& v : random) v = uniform(rng);
  ASSIGN_OR_RETURN(cuda::DeviceBuffer block, cuda::UploadAs(device, random, type, stream.get()));
  ASSIGN_OR_RETURN(cuda::DeviceBuffer x, cuda::DeviceBuffer::Create(device, activation_bytes));
  ASSIGN_OR_RETURN(cuda::DeviceBuffer y, cuda::DeviceBuffer::Create(device, activation_bytes));
  ASSIGN_OR_RETURN(cuda::DeviceBuffer w, cuda::DeviceBuffer::Create(device, weight_bytes));
  const size_t block_bytes = random.size() * e;
  RETURN_IF_ERROR(Tile(block, block_bytes, x.get(), activation_bytes, stream.get()));
  RETURN_IF_ERROR(Tile(block, block_bytes, w.get(), weight_bytes, stream.get()));

  const cublasComputeType_t compute =
      type == cuda::ElementType::kFp32 && tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t data = cuda::CudaType(type);
  std::vector<GemmTiming> timings;
  for (int64_t rows : tokens) {
    for (const auto& shape : shapes) {
      ASSIGN_OR_RETURN(cuda::MatmulDesc desc, cuda::MatmulDesc::Create(compute, CUDA_R_32F));
      const cublasOperation_t transpose = CUBLAS_OP_T;
      const cublasOperation_t no_transpose = CUBLAS_OP_N;
      RETURN_IF_ERROR(desc.Set(CUBLASLT_MATMUL_DESC_TRANSA, transpose));
      RETURN_IF_ERROR(desc.Set(CUBLASLT_MATMUL_DESC_TRANSB, no_transpose));
      ASSIGN_OR_RETURN(cuda::MatrixLayout a,
                       cuda::MatrixLayout::Create(data, shape.in, shape.out, shape.in));
      ASSIGN_OR_RETURN(
          cuda::MatrixLayout b,
          cuda::MatrixLayout::Create(data, shape.in, static_cast<uint64_t>(rows), shape.in));
      ASSIGN_OR_RETURN(
          cuda::MatrixLayout d,
          cuda::MatrixLayout::Create(data, shape.out, static_cast<uint64_t>(rows), shape.out));
      ASSIGN_OR_RETURN(cublasLtMatmulAlgo_t algo,
                       cuda::PickMatmulAlgo(handle.get(), desc, a, b, d, kWorkspaceBytes));
      const float alpha = 1.f;
      const float beta = 0.f;
      const auto gemm = [&]() -> absl::Status {
        CUBLAS_RETURN_IF_ERROR(handle.Matmul(desc.get(), &alpha, w.get(), a.get(), x.get(), b.get(),
                                             &beta, y.get(), d.get(), y.get(), d.get(), &algo,
                                             workspace.get(), kWorkspaceBytes, stream.get()));
        return absl::OkStatus();
      };
      for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(gemm());
      CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get(), stream.get()));
      for (int i = 0; i < repetitions; ++i) RETURN_IF_ERROR(gemm());
      CUDA_RETURN_IF_ERROR(cudaEventRecord(stop.get(), stream.get()));
      CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop.get()));
      float ms = 0;
      CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.get(), stop.get()));
      GemmTiming timing{.name = shape.name, .tokens = rows, .in = shape.in, .out = shape.out};
      timing.us = static_cast<double>(ms) * 1e3 / repetitions;
      timing.tflops =
          2.0 * static_cast<double>(rows) * shape.in * shape.out / (timing.us * 1e-6) / 1e12;
      timings.push_back(timing);
    }
  }
  return timings;
}

}  // namespace sluice::bench
