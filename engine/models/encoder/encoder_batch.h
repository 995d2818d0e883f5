#pragma once

// What every backend of the encoder does the same way around its forward pass: reading a
// validated request's token inputs, packing them into a PackedBatch (no padding rows, RoBERTa's
// positions), and turning the packed results (hidden states, pooled embeddings, pooler and
// classifier outputs) back into each request's own tensors. The CPU instance
// (encoder_model.cc) and the CUDA one (engine/cuda/cuda_encoder.cc) both use these, so the two
// cannot drift apart in what a request means or what it gets back.
//
// Also the GPU-only parameters of an `encoder` config (compute type, TF32, CUDA graph buckets):
// parsed here, device-neutral, so that a typo fails the load on every backend alike.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/model_config.h"
#include "engine/core/tensor.h"
#include "engine/models/encoder/encoder_forward.h"
#include "engine/models/encoder/encoder_network.h"

namespace sluice::engine::models::encoder {

// The config's names (inputs, outputs, parameters), shared by every backend.
inline constexpr char kInputIdsName[] = "input_ids";
inline constexpr char kAttentionMaskName[] = "attention_mask";
inline constexpr char kTokenTypeIdsName[] = "token_type_ids";
inline constexpr char kLastHiddenStateName[] = "last_hidden_state";
inline constexpr char kEmbeddingName[] = "embedding";
inline constexpr char kPoolerOutputName[] = "pooler_output";
inline constexpr char kLogitsName[] = "logits";
// The logits through the checkpoint's score activation (EncoderNetwork::score_activation): what
// sentence-transformers' CrossEncoder.predict returns, so that clients need no post-processing.
inline constexpr char kScoreName[] = "score";
inline constexpr char kComputeTypeParam[] = "compute_type";
inline constexpr char kAllowTf32Param[] = "allow_tf32";
inline constexpr char kCudaBucketsParam[] = "cuda_buckets";

// A request's token inputs by role (null when absent), as bound by request validation.
struct RequestTokens {
  const TensorView* ids = nullptr;
  const TensorView* mask = nullptr;
  const TensorView* types = nullptr;
};
RequestTokens FindRequestTokens(std::span<const TensorView> inputs);

// A request's [batch, seq] shape.
struct RequestShape {
  int64_t rows = 0;
  int64_t seq = 0;
};

// Element `i` of a validated INT64 or INT32 tensor.
int64_t IntAt(const TensorView& tensor, int64_t i);

// Packed length of row `r` (seq columns): up to and including the mask's last 1.
int64_t RowLength(const RequestTokens& in, int64_t r, int64_t seq);

// Appends the request's rows to `batch` (one sequence per row: its tokens up to the mask's last
// 1, token types, positions with RoBERTa's offset, the attend flags). INTERNAL when the request
// has no bound [batch, seq] input_ids (validation guarantees it: the engine's bug otherwise).
absl::StatusOr<RequestShape> PackRequest(const EncoderNetwork& net, const RequestTokens& in,
                                         PackedBatch& batch);

// Applies `activation` to one row of `width` logits in place (the `score` output).
void ApplyScoreActivation(ScoreActivation activation, float* row, int width);

// Which of config.outputs `requested` (the request's requested_outputs; empty: all) names.
std::vector<bool> WantedOutputs(const ModelConfig& config,
                                const std::vector<std::string>& requested);

// A packed batch's results, host memory, FP32. Any may be null where no request wants it.
struct PackedResults {
  const float* hidden = nullptr;     // [tokens, hidden], at the batch's packed offsets
  const float* embedding = nullptr;  // [sequences, embedding_size()]
  const float* pooler = nullptr;     // [sequences, hidden]
  const float* logits = nullptr;     // [sequences, num_labels]
};

// One request's outputs, one tensor per config output in config order (unwanted ones left empty,
// unnamed); its sequences are batch sequences [first_sequence, first_sequence + shape.rows).
// last_hidden_state rows past a sequence's packed length are zeros; input_ids is the tokens the
// request ran with, 0 past each row's end.
std::vector<Tensor> RequestOutputs(const ModelConfig& config, const EncoderNetwork& net,
                                   const PackedBatch& batch, const RequestTokens& in,
                                   RequestShape shape, int first_sequence,
                                   const std::vector<bool>& wanted, const PackedResults& results);

// The GPU's precision for the encoder (parameter compute_type): the checkpoint's own type (FP16 /
// BF16 weights compute in that type with FP32 accumulation, FP32 weights in FP32), or forced.
enum class ComputeType { kCheckpoint, kFp32, kFp16, kBf16 };

// One CUDA graph bucket: batches of at most `sequences` sequences and `tokens` real tokens.
struct TokenBucket {
  int sequences = 0;
  int64_t tokens = 0;
  bool operator==(const TokenBucket&) const = default;
};

// At most this many buckets per model (each costs a CUDA graph per slot and load time).
inline constexpr int kMaxTokenBuckets = 8;

struct GpuOptions {
  ComputeType compute = ComputeType::kCheckpoint;
  // TF32 tensor cores for FP32 GEMMs (as the mlp backend's allow_tf32).
  bool allow_tf32 = false;
  // Ascending by tokens, then sequences; the last one holds (max_batch_size, max_batch_tokens).
  std::vector<TokenBucket> buckets;
};

// Parses compute_type ("checkpoint" (default), "fp32", "fp16", "bf16"), allow_tf32 ("true" /
// "false", default "false") and cuda_buckets ("SxT,SxT,...": sequences x tokens, e.g.
// "1x128,8x1024,32x4096"; at most kMaxTokenBuckets). Without cuda_buckets: tokens
// max_batch_tokens, /4, /16, /64 (those >= 16), each with min(max_batch_size, tokens) sequences.
// InvalidArgument naming the parameter and the limit when a value is malformed, or when no bucket
// holds a full batch (max_batch_size sequences and max_batch_tokens tokens): the batcher would
// form batches that no graph can run.
absl::StatusOr<GpuOptions> ParseGpuOptions(const ModelConfig& config, int64_t max_batch_tokens);

// "checkpoint", "fp32", ... for messages.
const char* ComputeTypeName(ComputeType type);

}  // namespace sluice::engine::models::encoder
