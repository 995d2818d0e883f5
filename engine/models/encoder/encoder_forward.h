#pragma once

// The CPU forward pass of a BERT-family encoder on packed tokens. A batch is the concatenation of
// its sequences, back to back, with no padding rows: every linear layer is one GEMM over all the
// batch's tokens (encoder_gemm.h's PackedGemm on weights packed at load, on the calling thread),
// attention runs per sequence and head over that sequence's own tokens (its two products on the
// same GEMM, keys and values packed per head), so a batch of an 8-token and a 500-token sequence
// costs what the two cost alone, and a sequence's result does not depend on its batch-mates (the
// linear layers give a row the same bits wherever it sits in the batch; tested to 1e-5 end to
// end).
//
// Numerics as Hugging Face's BertModel / RobertaModel / DistilBertModel / MPNetModel in FP32 (eval
// mode): word + position (+ token-type) embeddings and LayerNorm; per layer one fused QKV GEMM,
// scaled dot-product attention (MPNet: plus its relative position bias) with masked keys excluded
// (their softmax weight is exactly 0, as HF's additive finfo.min mask gives), output projection
// with bias + residual + LayerNorm in one pass, intermediate GEMM with bias + activation in one
// pass, output GEMM with bias + residual + LayerNorm in one pass. Those passes and the softmax are
// encoder_kernels.h's vectorized kernels (AVX-512F or AVX2 + FMA where the CPU has them); the QKV
// bias is the GEMM accumulators' starting value.
//
// ModernBERT's pre-norm layers (EncoderNetwork::layer_plans) run encoder_modernbert.h's
// ForwardPreNorm, which Forward calls, under the same contract.

#include <cstdint>
#include <vector>

#include "engine/core/compute_pool.h"
#include "engine/models/encoder/encoder_network.h"

namespace sluice::engine::models::encoder {

// The sequences of one batch, packed. Position ids already include RoBERTa's offset; every id is
// in range (request validation checked them). The CUDA encoder is meant to take the same
// description.
struct PackedBatch {
  std::vector<int32_t> token_ids;    // [tokens]
  std::vector<int32_t> token_types;  // [tokens]
  std::vector<int32_t> positions;    // [tokens]
  // [tokens]: 1 where the attention mask is 1. A 0 inside a sequence (before its last 1) keeps its
  // row but no query attends to it and pooling skips it; trailing zeros are not packed at all.
  std::vector<uint8_t> attend;
  // [sequences + 1]: sequence s is tokens [offsets[s], offsets[s + 1]); each has >= 1 token.
  std::vector<int64_t> offsets{0};

  int64_t tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int sequences() const { return static_cast<int>(offsets.size()) - 1; }
  void Clear();
};

// Scratch of one instance, grown to the largest batch it has run (never shrunk).
class EncoderWorkspace {
 public:
  // After Forward: [tokens, hidden], the last layer's hidden states of the packed batch.
  const float* hidden() const { return hidden_.data(); }

 private:
  friend void Forward(const EncoderNetwork&, const PackedBatch&, EncoderWorkspace&, int64_t,
                      ComputePool*);
  friend void PoolerOutput(const EncoderNetwork&, const PackedBatch&, EncoderWorkspace&, float*);
  friend void Logits(const EncoderNetwork&, const PackedBatch&, EncoderWorkspace&, float*);
  friend void ForwardPreNorm(const EncoderNetwork&, const PackedBatch&, EncoderWorkspace&, int64_t,
                             ComputePool*);
  friend void ForwardDecoder(const EncoderNetwork&, const PackedBatch&, EncoderWorkspace&, int64_t,
                             ComputePool*);
  // Grows the scratch for a forward pass over `batch` in chunks of at most `budget` tokens
  // (ChunkEnd's): the whole batch's T tokens, C in its widest chunk (the pass through the layers);
  // attention scratch for `workers` compute workers, scores for at most `query_block` queries at a
  // time (-1: the longest sequence's). Shared by the three forward passes (Forward,
  // ForwardPreNorm, ForwardDecoder).
  void Reserve(const EncoderNetwork& net, const PackedBatch& batch, int64_t budget, int workers,
               int64_t query_block = -1);

  // One compute worker's attention scratch: one head's scores and its keys and values in the
  // GEMM's panel layout (PackPanels), 64-byte aligned within `panels`.
  struct AttentionScratch {
    std::vector<float> scores;  // [longest, longest]
    std::vector<float> panels;
    float* key_panels = nullptr;
    float* value_panels = nullptr;
  };

  std::vector<float> hidden_;                // [T, H]
  std::vector<float> qkv_;                   // [C, 3H] (Qwen3: [C, qkv_width()])
  std::vector<float> context_;               // [C, H] (Qwen3: [C, context_width()])
  std::vector<float> projected_;             // [C, H]
  std::vector<float> intermediate_;          // [C, I]
  std::vector<float> gated_;                 // [C, 2I]: a gated MLP's input and gate
  std::vector<AttentionScratch> attention_;  // one per compute worker
  std::vector<float> mask_add_;      // [T]: 0 attended, -inf masked (the softmax's key mask)
  std::vector<float> first_tokens_;  // [S, H]
  std::vector<float> head_;          // [S, H]
};

// Forward takes whole sequences through the layers in chunks of at most this many tokens (a
// longer sequence alone; why: encoder_forward.cc). ForwardChunkTokens() is this, or
// SLUICE_ENCODER_CHUNK_TOKENS where set (benchmarks; 0 or less: the whole batch at once).
inline constexpr int64_t kForwardChunkTokens = 512;
int64_t ForwardChunkTokens();

// Runs the encoder over `batch`; the result is workspace.hidden(). The chunking does not change a
// bit of the answer (each GEMM row and each sequence's attention is computed alone), nor does the
// pool: each step is split into tasks that write disjoint parts of its output (GEMM column panels
// and row blocks, a sequence's head, blocks of rows), each computed as the single-threaded pass
// computes it. `pool` null: every step on the calling thread.
void Forward(const EncoderNetwork& net, const PackedBatch& batch, EncoderWorkspace& workspace,
             int64_t chunk_tokens = ForwardChunkTokens(), ComputePool* pool = nullptr);

// The `embedding` of sequence `s` after Forward: [embedding_size()] floats written to `out`
// (pooling modes in sentence-transformers' order cls, max, mean, mean_sqrt_len, weightedmean,
// lasttoken; then the Dense modules in order; then L2 normalisation when net.normalize).
void PoolEmbedding(const EncoderNetwork& net, const PackedBatch& batch, const float* hidden, int s,
                   float* out);

// pooler_output after Forward: [sequences, H] = tanh(first token x W^T + b). REQUIRES has_pooler().
void PoolerOutput(const EncoderNetwork& net, const PackedBatch& batch, EncoderWorkspace& workspace,
                  float* out);

// logits after Forward: [sequences, num_labels]. REQUIRES classifier != kNone.
void Logits(const EncoderNetwork& net, const PackedBatch& batch, EncoderWorkspace& workspace,
            float* out);

}  // namespace sluice::engine::models::encoder
