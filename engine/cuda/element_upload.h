#pragma once

// The device element types of the GPU models' weights and activations (FP32, FP16, BF16) on the
// host side: their sizes, cuBLASLt data types and names, and the load-time upload of FP32 host
// weights into a device buffer of one of them. Shared by the MLP and the encoder instances.

#include <cuda_runtime_api.h>
#include <library_types.h>

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/cuda/cuda_handles.h"
#include "engine/cuda/kernels/dense_epilogue.cuh"

namespace sluice::engine::cuda {

inline size_t ElementBytes(ElementType type) { return type == ElementType::kFp32 ? 4 : 2; }

inline cudaDataType_t CudaType(ElementType type) {
  switch (type) {
    case ElementType::kFp16:
      return CUDA_R_16F;
    case ElementType::kBf16:
      return CUDA_R_16BF;
    case ElementType::kFp32:
      break;
  }
  return CUDA_R_32F;
}

inline const char* ElementTypeName(ElementType type) {
  return type == ElementType::kFp16 ? "FP16" : type == ElementType::kBf16 ? "BF16" : "FP32";
}

// A new buffer on `device` holding FP32 `values` as `type` (converted on the device, on
// `stream`); an empty `values` gets a one-element buffer, so that every weight has an address.
// Load time only: it waits for `stream`, so the staging buffer and the pageable host copy are done
// with when it returns.
absl::StatusOr<DeviceBuffer> UploadAs(int device, const std::vector<float>& values,
                                      ElementType type, cudaStream_t stream);

}  // namespace sluice::engine::cuda
