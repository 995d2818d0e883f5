#pragma once

// The encoder's kernels on the GPU (cuda_encoder.cc drives them; the GEMMs are cuBLASLt's). Every
// kernel works on packed tokens, no padding rows: a batch is described by device buffers (token
// ids, types, positions, attend flags, cumulative sequence lengths and the real counts), which a
// captured CUDA graph reads on each replay, so lengths change between replays without a
// re-capture. Kernels are sized for a bucket's capacity (max_sequences, max_tokens) at launch;
// the real counts come from device memory. Activations are FP16, BF16 or FP32 (ElementType);
// every reduction, LayerNorm and softmax is computed in FP32. Host-includable.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "engine/cuda/kernels/dense_epilogue.cuh"

namespace sluice::engine::cuda {

// A packed batch in device memory (a slot's input block), sized for its bucket. Rows past the
// real token count hold token id 0, type 0, position 0 and attend 0; cu_seqlens past the real
// sequence count repeat the token count (empty sequences).
struct EncoderBatchView {
  const int32_t* counts = nullptr;       // [2]: sequences, tokens (the real ones)
  const int32_t* cu_seqlens = nullptr;   // [max_sequences + 1]: sequence s is [cu[s], cu[s + 1])
  const int32_t* token_ids = nullptr;    // [max_tokens]
  const int32_t* token_types = nullptr;  // [max_tokens]
  const int32_t* positions = nullptr;    // [max_tokens], RoBERTa's offset included
  const int32_t* attend = nullptr;       // [max_tokens]: 1 attended, 0 masked (inside a sequence)
  int max_sequences = 0;
  int max_tokens = 0;
};

// The embedding tables and their LayerNorm. word/position/type in `type`; gamma/beta FP32.
struct EmbeddingTables {
  const void* word = nullptr;      // [vocab, hidden]
  const void* position = nullptr;  // [positions, hidden]
  const void* type = nullptr;      // [types, hidden], or null (no token types)
  const float* gamma = nullptr;
  const float* beta = nullptr;
  int vocab = 0;
  int positions = 0;
  int types = 0;
};

// The largest hidden size the LayerNorm kernels hold in shared memory (32 KB of FP32, under the
// 48 KB a block gets without opting in).
inline constexpr int kMaxEncoderHidden = 8192;
// The head sizes the attention kernel is instantiated for.
bool SupportedHeadSize(int head_size);

// out[t] = LayerNorm(word[id[t]] + type[type[t]] + position[pos[t]]) for every t < max_tokens
// (ids clamped into their tables: a bad id reads a wrong row, never out of bounds).
absl::Status LaunchEmbeddingLayerNorm(const EncoderBatchView& batch, const EmbeddingTables& tables,
                                      float eps, int hidden, ElementType type, void* out,
                                      cudaStream_t stream);

// x[r] = LayerNorm(projected[r] + bias + x[r]) in place, rows x hidden of `type`; bias, gamma,
// beta FP32.
absl::Status LaunchBiasResidualLayerNorm(const void* projected, const float* bias, void* x,
                                         const float* gamma, const float* beta, float eps, int rows,
                                         int hidden, ElementType type, cudaStream_t stream);

// Scaled dot-product attention per sequence and head over packed tokens: qkv is the fused QKV
// GEMM's output [max_tokens, 3 x hidden] (query, key, value column blocks, head h at h x
// head_size in each), context [max_tokens, hidden]. Masked keys (attend 0) get weight 0; the
// softmax is online (one pass over the keys, FP32 running max, sum and accumulator), scale
// 1/sqrt(head_size). `longest` bounds every sequence's length (the grid covers that many query
// rows per sequence). InvalidArgument for an unsupported head size or a grid CUDA cannot launch.
absl::Status LaunchVarlenAttention(const void* qkv, const EncoderBatchView& batch, int heads,
                                   int head_size, int longest, ElementType type, void* context,
                                   cudaStream_t stream);

struct PoolingFlags {
  bool cls = false;
  bool max = false;
  bool mean = false;
  bool mean_sqrt_len = false;
  bool normalize = false;
  int count() const { return cls + max + mean + mean_sqrt_len; }
};

// out[s] ([count x hidden] FP32 per sequence, modes in sentence-transformers' order cls, max,
// mean, mean_sqrt_len; then L2-normalised if asked) for every s < max_sequences; an empty
// (padding) sequence gets zeros. Masked tokens are skipped as the CPU's PoolEmbedding skips them.
absl::Status LaunchPoolEmbedding(const void* hidden_states, const EncoderBatchView& batch,
                                 int hidden, PoolingFlags pooling, ElementType type, float* out,
                                 cudaStream_t stream);

// out[s] = hidden_states[cu[s]] (the sequence's first token) for s < max_sequences, zeros for an
// empty sequence. Same `type` in and out.
absl::Status LaunchGatherFirstTokens(const void* hidden_states, const EncoderBatchView& batch,
                                     int hidden, ElementType type, void* out, cudaStream_t stream);

// y = activation(x + bias) over rows x columns of `type` (bias FP32, may be null; activation
// kNone or kTanh), written as FP32 to out_f32 and/or as `type` to out_typed (either may be null).
absl::Status LaunchHeadEpilogue(const void* x, const float* bias, int rows, int columns,
                                DeviceActivation activation, ElementType type, float* out_f32,
                                void* out_typed, cudaStream_t stream);

// y[r][o] = sum_k x[r][k] w[o][k] (nn.Linear without bias) over rows x in -> out, all of `type`,
// FP32 accumulation: one warp per output element. For the small head GEMMs (pooler, classifier:
// one row per sequence) where cuBLASLt offers no algorithm for a shape (an odd label count in a
// 16-bit type, say); not for the per-token layers.
absl::Status LaunchSmallLinear(const void* x, const void* w, int rows, int in, int out,
                               ElementType type, void* y, cudaStream_t stream);

}  // namespace sluice::engine::cuda
