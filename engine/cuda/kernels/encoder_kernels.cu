#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels/encoder_kernels.cuh"

namespace sluice::engine::cuda {
namespace {

// common/status_macros.h is C++20; nvcc compiles this file as C++17.
#define SLUICE_KERNEL_RETURN_IF_ERROR(expr)          \
  do {                                               \
    absl::Status sluice_status_ = (expr);            \
    if (!sluice_status_.ok()) return sluice_status_; \
  } while (false)

constexpr int kRowThreads = 256;
// Grid limits CUDA guarantees on every GPU it runs (x: 2^31 - 1; y, z: 65535).
constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxGridYZ = 65535;

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// `scratch` holds 32 floats; the function syncs before reusing it.
__device__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  float total = lane < warps ? scratch[lane] : 0.f;
  return WarpSum(total);
}

__device__ __forceinline__ int Clamp(int v, int limit) {
  return v < 0 ? 0 : (v >= limit ? limit - 1 : v);
}

// LayerNorm of the FP32 row in shared memory `row` (hidden values), written to `out` as T.
// Two passes (mean, then the variance of the deviations), as the CPU kernel, in FP32.
template <typename T>
__device__ void NormalizeRow(const float* row, int hidden, const float* gamma, const float* beta,
                             float eps, float* scratch, T* out) {
  float sum = 0.f;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) sum += row[j];
  const float mean = BlockSum(sum, scratch) / hidden;
  float squares = 0.f;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
    const float d = row[j] - mean;
    squares += d * d;
  }
  const float variance = BlockSum(squares, scratch) / hidden;
  const float inverse = rsqrtf(variance + eps);
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
    out[j] = FromFloat<T>((row[j] - mean) * inverse * gamma[j] + beta[j]);
  }
}

template <typename T>
__global__ void EmbeddingLayerNormKernel(EncoderBatchView batch, const T* word, const T* position,
                                         const T* type, const float* gamma, const float* beta,
                                         int vocab, int positions, int types, float eps, int hidden,
                                         T* out) {
  extern __shared__ float row[];
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const int64_t id = Clamp(batch.token_ids[t], vocab);
  const int64_t pos = Clamp(batch.positions[t], positions);
  const T* w = word + id * hidden;
  const T* p = position + pos * hidden;
  const T* ty =
      type == nullptr ? nullptr : type + int64_t{Clamp(batch.token_types[t], types)} * hidden;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
    // Hugging Face's order of addition: word + token type, then position.
    float v = ToFloat(w[j]);
    if (ty != nullptr) v += ToFloat(ty[j]);
    row[j] = v + ToFloat(p[j]);
  }
  __syncthreads();
  NormalizeRow(row, hidden, gamma, beta, eps, scratch, out + t * hidden);
}

template <typename T>
__global__ void BiasResidualLayerNormKernel(const T* projected, const float* bias, T* x,
                                            const float* gamma, const float* beta, float eps,
                                            int hidden) {
  extern __shared__ float row[];
  __shared__ float scratch[32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * hidden;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
    row[j] = ToFloat(projected[offset + j]) + bias[j] + ToFloat(x[offset + j]);
  }
  __syncthreads();
  NormalizeRow(row, hidden, gamma, beta, eps, scratch, x + offset);
}

// Varlen attention. One block per (sequence, head, tile of kQueries query rows): kWarps warps,
// each owning kQueries / kWarps queries of the tile. Keys and values go through shared memory
// kKeys at a time; in a key tile, lane j scores key j against a query (the dot product over the
// head in FP32, the query pre-scaled), the warp reduces the tile's max and sum, and each lane
// accumulates the head dimensions j, j + 32, ... of p x V. The online softmax keeps per query a
// running max m, sum l and accumulator, rescaled by exp(m_old - m_new) when the max grows.
constexpr int kWarps = 4;
constexpr int kQueriesPerWarp = 4;
constexpr int kQueries = kWarps * kQueriesPerWarp;
constexpr int kKeys = 32;

template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32)
    VarlenAttentionKernel(const T* qkv, EncoderBatchView batch, int hidden, float scale,
                          T* context) {
  constexpr int kPerLane = (D + 31) / 32;
  __shared__ float q_s[kQueries][D];
  __shared__ float k_s[kKeys][D + 1];  // +1: lane j reads row j, column c: no bank conflicts
  __shared__ float v_s[kKeys][D];
  __shared__ float valid_s[kKeys];

  const int s = blockIdx.x;
  const int head = blockIdx.y;
  const int q0 = blockIdx.z * kQueries;
  const int64_t begin = batch.cu_seqlens[s];
  const int n = static_cast<int>(batch.cu_seqlens[s + 1] - begin);
  if (q0 >= n) return;  // the whole block: past this sequence's queries (or a padding sequence)

  const int64_t ld = 3 * static_cast<int64_t>(hidden);
  const T* q_base = qkv + begin * ld + static_cast<int64_t>(head) * D;
  const T* k_base = q_base + hidden;
  const T* v_base = q_base + 2 * static_cast<int64_t>(hidden);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;

  for (int i = threadIdx.x; i < kQueries * D; i += blockDim.x) {
    const int r = i / D;
    const int c = i % D;
    q_s[r][c] = q0 + r < n ? ToFloat(q_base[(q0 + r) * ld + c]) * scale : 0.f;
  }

  float m[kQueriesPerWarp];
  float l[kQueriesPerWarp];
  float acc[kQueriesPerWarp][kPerLane];
#pragma unroll
  for (int j = 0; j < kQueriesPerWarp; ++j) {
    m[j] = -INFINITY;
    l[j] = 0.f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) acc[j][e] = 0.f;
  }

  for (int k0 = 0; k0 < n; k0 += kKeys) {
    __syncthreads();  // the previous key tile has been consumed (and q_s written, first time)
    for (int i = threadIdx.x; i < kKeys * D; i += blockDim.x) {
      const int r = i / D;
      const int c = i % D;
      const bool in = k0 + r < n;
      k_s[r][c] = in ? ToFloat(k_base[(k0 + r) * ld + c]) : 0.f;
      v_s[r][c] = in ? ToFloat(v_base[(k0 + r) * ld + c]) : 0.f;
    }
    if (threadIdx.x < kKeys) {
      const int key = k0 + threadIdx.x;
      valid_s[threadIdx.x] = key < n && batch.attend[begin + key] != 0 ? 1.f : 0.f;
    }
    __syncthreads();
    const bool valid = valid_s[lane] != 0.f;
#pragma unroll
    for (int j = 0; j < kQueriesPerWarp; ++j) {
      const int qi = warp * kQueriesPerWarp + j;
      if (q0 + qi >= n) continue;  // warp-uniform
      float score = -INFINITY;
      if (valid) {
        float dot = 0.f;
#pragma unroll 16
        for (int c = 0; c < D; ++c) dot = fmaf(q_s[qi][c], k_s[lane][c], dot);
        score = dot;
      }
      const float m_new = fmaxf(m[j], WarpMax(score));
      if (m_new == -INFINITY) continue;  // every key so far masked: nothing to add (warp-uniform)
      const float p = valid ? expf(score - m_new) : 0.f;
      const float correction = expf(m[j] - m_new);  // 0 when m[j] was -inf
      l[j] = l[j] * correction + WarpSum(p);
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) acc[j][e] *= correction;
      for (int key = 0; key < kKeys; ++key) {
        const float pk = __shfl_sync(0xffffffffu, p, key);
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) {
          const int c = lane + 32 * e;
          if (c < D) acc[j][e] = fmaf(pk, v_s[key][c], acc[j][e]);
        }
      }
      m[j] = m_new;
    }
  }
#pragma unroll
  for (int j = 0; j < kQueriesPerWarp; ++j) {
    const int qi = warp * kQueriesPerWarp + j;
    if (q0 + qi >= n) continue;
    // A sequence's last token is always attended, so l > 0; guard anyway (no division by 0).
    const float inverse = l[j] > 0.f ? 1.f / l[j] : 0.f;
    T* out =
        context + (begin + q0 + qi) * static_cast<int64_t>(hidden) + static_cast<int64_t>(head) * D;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int c = lane + 32 * e;
      if (c < D) out[c] = FromFloat<T>(acc[j][e] * inverse);
    }
  }
}

template <typename T>
__global__ void PoolEmbeddingKernel(const T* hidden_states, EncoderBatchView batch, int hidden,
                                    PoolingFlags pooling, int modes, float* out) {
  __shared__ float scratch[32];
  const int s = blockIdx.x;
  const int64_t begin = batch.cu_seqlens[s];
  const int64_t end = batch.cu_seqlens[s + 1];
  const int width = hidden * modes;
  float* row = out + static_cast<int64_t>(s) * width;
  float count = 0.f;
  for (int64_t t = begin; t < end; ++t) count += batch.attend[t] != 0 ? 1.f : 0.f;
  // sentence-transformers clamps the mask sum to 1e-9, as the CPU does.
  const float divisor = fmaxf(count, 1e-9f);
  float squares = 0.f;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
    float sum = 0.f;
    float maximum = -1e9f;  // sentence-transformers sets masked tokens to -1e9 before the max
    for (int64_t t = begin; t < end; ++t) {
      if (batch.attend[t] == 0) continue;
      const float v = ToFloat(hidden_states[t * hidden + j]);
      sum += v;
      maximum = fmaxf(maximum, v);
    }
    int slot = 0;
    float values[4];
    if (pooling.cls)
      values[slot++] = end > begin ? ToFloat(hidden_states[begin * hidden + j]) : 0.f;
    if (pooling.max) values[slot++] = end > begin ? maximum : 0.f;
    if (pooling.mean) values[slot++] = sum / divisor;
    if (pooling.mean_sqrt_len) values[slot++] = sum / sqrtf(divisor);
    for (int k = 0; k < slot; ++k) {
      row[k * hidden + j] = values[k];
      squares += values[k] * values[k];
    }
  }
  if (!pooling.normalize) return;
  const float norm = sqrtf(BlockSum(squares, scratch));  // syncs: every row value is written
  // torch.nn.functional.normalize: x / max(||x||, 1e-12).
  const float inverse = 1.f / fmaxf(norm, 1e-12f);
  for (int j = threadIdx.x; j < width; j += blockDim.x) row[j] *= inverse;
}

template <typename T>
__global__ void GatherFirstTokensKernel(const T* hidden_states, EncoderBatchView batch, int hidden,
                                        T* out) {
  const int s = blockIdx.x;
  const int64_t begin = batch.cu_seqlens[s];
  const bool empty = batch.cu_seqlens[s + 1] <= begin;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
    out[static_cast<int64_t>(s) * hidden + j] =
        empty ? FromFloat<T>(0.f) : hidden_states[begin * hidden + j];
  }
}

template <typename T>
__global__ void HeadEpilogueKernel(const T* x, const float* bias, int64_t count, int columns,
                                   bool tanh_activation, float* out_f32, T* out_typed) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = ToFloat(x[i]);
    if (bias != nullptr) v += bias[i % columns];
    if (tanh_activation) v = tanhf(v);
    if (out_f32 != nullptr) out_f32[i] = v;
    if (out_typed != nullptr) out_typed[i] = FromFloat<T>(v);
  }
}

constexpr int kLinearWarps = 8;

template <typename T>
__global__ void __launch_bounds__(kLinearWarps * 32)
    SmallLinearKernel(const T* x, const T* w, int in, int out, T* y) {
  const int r = blockIdx.x;
  const int o = blockIdx.y * kLinearWarps + (threadIdx.x >> 5);
  if (o >= out) return;  // whole warps only: the warp below reduces with every lane present
  const int lane = threadIdx.x & 31;
  const T* xr = x + static_cast<int64_t>(r) * in;
  const T* wo = w + static_cast<int64_t>(o) * in;
  float sum = 0.f;
  for (int k = lane; k < in; k += 32) sum = fmaf(ToFloat(xr[k]), ToFloat(wo[k]), sum);
  sum = WarpSum(sum);
  if (lane == 0) y[static_cast<int64_t>(r) * out + o] = FromFloat<T>(sum);
}

// Calls `f` with a null pointer of the element type of `type`.
template <typename F>
absl::Status Dispatch(ElementType type, F&& f) {
  switch (type) {
    case ElementType::kFp16:
      f(static_cast<__half*>(nullptr));
      break;
    case ElementType::kBf16:
      f(static_cast<__nv_bfloat16*>(nullptr));
      break;
    case ElementType::kFp32:
      f(static_cast<float*>(nullptr));
      break;
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status CheckRows(int64_t rows, const char* what) {
  if (rows < 1 || rows > kMaxGridX) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", rows, " rows is outside [1, ", kMaxGridX, "]"));
  }
  return absl::OkStatus();
}

absl::Status CheckHidden(int hidden, const char* what) {
  if (hidden < 1 || hidden > kMaxEncoderHidden) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": hidden size ", hidden, " is outside [1, ", kMaxEncoderHidden, "]"));
  }
  return absl::OkStatus();
}

int RowBlock(int hidden) {
  // Enough threads for the row, in whole warps, at most kRowThreads.
  int threads = (hidden + 31) / 32 * 32;
  return threads > kRowThreads ? kRowThreads : threads;
}

template <typename T, int D>
void LaunchAttention(const void* qkv, const EncoderBatchView& batch, int hidden, int heads,
                     int tiles, void* context, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(batch.max_sequences), static_cast<unsigned>(heads),
                  static_cast<unsigned>(tiles));
  const float scale = 1.f / sqrtf(static_cast<float>(D));
  VarlenAttentionKernel<T, D><<<grid, kWarps * 32, 0, stream>>>(
      static_cast<const T*>(qkv), batch, hidden, scale, static_cast<T*>(context));
}

}  // namespace

bool SupportedHeadSize(int head_size) {
  return head_size == 16 || head_size == 32 || head_size == 64 || head_size == 128;
}

absl::Status LaunchEmbeddingLayerNorm(const EncoderBatchView& batch, const EmbeddingTables& tables,
                                      float eps, int hidden, ElementType type, void* out,
                                      cudaStream_t stream) {
  SLUICE_KERNEL_RETURN_IF_ERROR(CheckRows(batch.max_tokens, "embedding"));
  SLUICE_KERNEL_RETURN_IF_ERROR(CheckHidden(hidden, "embedding"));
  if (tables.vocab < 1 || tables.positions < 1 || (tables.type != nullptr && tables.types < 1)) {
    return absl::InvalidArgumentError("embedding: empty table");
  }
  const size_t shared = static_cast<size_t>(hidden) * sizeof(float);
  return Dispatch(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    EmbeddingLayerNormKernel<T><<<batch.max_tokens, RowBlock(hidden), shared, stream>>>(
        batch, static_cast<const T*>(tables.word), static_cast<const T*>(tables.position),
        static_cast<const T*>(tables.type), tables.gamma, tables.beta, tables.vocab,
        tables.positions, tables.types, eps, hidden, static_cast<T*>(out));
  });
}

absl::Status LaunchBiasResidualLayerNorm(const void* projected, const float* bias, void* x,
                                         const float* gamma, const float* beta, float eps, int rows,
                                         int hidden, ElementType type, cudaStream_t stream) {
  SLUICE_KERNEL_RETURN_IF_ERROR(CheckRows(rows, "residual LayerNorm"));
  SLUICE_KERNEL_RETURN_IF_ERROR(CheckHidden(hidden, "residual LayerNorm"));
  const size_t shared = static_cast<size_t>(hidden) * sizeof(float);
  return Dispatch(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    BiasResidualLayerNormKernel<T><<<rows, RowBlock(hidden), shared, stream>>>(
        static_cast<const T*>(projected), bias, static_cast<T*>(x), gamma, beta, eps, hidden);
  });
}

absl::Status LaunchVarlenAttention(const void* qkv, const EncoderBatchView& batch, int heads,
                                   int head_size, int longest, ElementType type, void* context,
                                   cudaStream_t stream) {
  if (!SupportedHeadSize(head_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention: head size ", head_size, " is not one of 16, 32, 64, 128"));
  }
  const int64_t tiles = (static_cast<int64_t>(longest) + kQueries - 1) / kQueries;
  if (batch.max_sequences < 1 || batch.max_sequences > kMaxGridX || heads < 1 ||
      heads > kMaxGridYZ || tiles < 1 || tiles > kMaxGridYZ) {
    return absl::InvalidArgumentError(absl::StrCat("attention: grid of ", batch.max_sequences,
                                                   " sequences x ", heads, " heads x ", tiles,
                                                   " query tiles is outside CUDA's limits"));
  }
  const int hidden = heads * head_size;
  return Dispatch(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const int t = static_cast<int>(tiles);
    switch (head_size) {
      case 16:
        LaunchAttention<T, 16>(qkv, batch, hidden, heads, t, context, stream);
        break;
      case 32:
        LaunchAttention<T, 32>(qkv, batch, hidden, heads, t, context, stream);
        break;
      case 64:
        LaunchAttention<T, 64>(qkv, batch, hidden, heads, t, context, stream);
        break;
      default:
        LaunchAttention<T, 128>(qkv, batch, hidden, heads, t, context, stream);
        break;
    }
  });
}

absl::Status LaunchPoolEmbedding(const void* hidden_states, const EncoderBatchView& batch,
                                 int hidden, PoolingFlags pooling, ElementType type, float* out,
                                 cudaStream_t stream) {
  SLUICE_KERNEL_RETURN_IF_ERROR(CheckRows(batch.max_sequences, "pooling"));
  if (pooling.count() == 0 || hidden < 1) {
    return absl::InvalidArgumentError("pooling: no mode, or an empty hidden size");
  }
  return Dispatch(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    PoolEmbeddingKernel<T><<<batch.max_sequences, RowBlock(hidden), 0, stream>>>(
        static_cast<const T*>(hidden_states), batch, hidden, pooling, pooling.count(), out);
  });
}

absl::Status LaunchGatherFirstTokens(const void* hidden_states, const EncoderBatchView& batch,
                                     int hidden, ElementType type, void* out, cudaStream_t stream) {
  SLUICE_KERNEL_RETURN_IF_ERROR(CheckRows(batch.max_sequences, "first tokens"));
  if (hidden < 1) return absl::InvalidArgumentError("first tokens: empty hidden size");
  return Dispatch(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    GatherFirstTokensKernel<T><<<batch.max_sequences, RowBlock(hidden), 0, stream>>>(
        static_cast<const T*>(hidden_states), batch, hidden, static_cast<T*>(out));
  });
}

absl::Status LaunchSmallLinear(const void* x, const void* w, int rows, int in, int out,
                               ElementType type, void* y, cudaStream_t stream) {
  const int64_t column_blocks = (static_cast<int64_t>(out) + kLinearWarps - 1) / kLinearWarps;
  if (rows < 1 || rows > kMaxGridX || in < 1 || out < 1 || column_blocks > kMaxGridYZ) {
    return absl::InvalidArgumentError(absl::StrCat("small linear: ", rows, " x ", in, " -> ", out,
                                                   " is outside the kernel's grid"));
  }
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(column_blocks));
  return Dispatch(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    SmallLinearKernel<T><<<grid, kLinearWarps * 32, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), in, out, static_cast<T*>(y));
  });
}

absl::Status LaunchHeadEpilogue(const void* x, const float* bias, int rows, int columns,
                                DeviceActivation activation, ElementType type, float* out_f32,
                                void* out_typed, cudaStream_t stream) {
  if (rows < 1 || columns < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("head epilogue: ", rows, " x ", columns, " is empty"));
  }
  if (activation != DeviceActivation::kNone && activation != DeviceActivation::kTanh) {
    return absl::InvalidArgumentError("head epilogue: only no activation or tanh");
  }
  const int64_t count = static_cast<int64_t>(rows) * columns;
  const int64_t wanted = (count + kRowThreads - 1) / kRowThreads;
  const int blocks = static_cast<int>(wanted > 4096 ? 4096 : wanted);
  const bool tanh_activation = activation == DeviceActivation::kTanh;
  return Dispatch(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    HeadEpilogueKernel<T><<<blocks, kRowThreads, 0, stream>>>(static_cast<const T*>(x), bias, count,
                                                              columns, tanh_activation, out_f32,
                                                              static_cast<T*>(out_typed));
  });
}

}  // namespace sluice::engine::cuda
