#pragma once

// ModernBERT (model_type "modernbert": gte-modernbert, nomic-modernbert-embed,
// gte-reranker-modernbert) in the CPU encoder: its config.json and weights, read into
// EncoderNetwork with every layer's computation as data (EncoderNetwork::layer_plans: pre-norm,
// GeGLU, rotary table, attention window), and the forward pass that executes those plans.
//
// Numerics as transformers' ModernBertModel / ModernBertForSequenceClassification in FP32 (eval,
// eager or sdpa attention; flash-attention's unpadded path computes the same): embeddings =
// LayerNorm(tok_embeddings[id]); per layer l, x += Wo(attention(rotary(Wqkv(attn_norm(x))))) with
// attn_norm the identity for l = 0, then x += mlp.Wo(act(input) * gate) where [input, gate] =
// mlp.Wi(mlp_norm(x)); final_norm at the end. Layer l attends globally where l %
// global_attn_every_n_layers == 0 (rotary theta global_rope_theta), else to keys within
// local_attention / 2 positions of the query (local_rope_theta). The batch stays packed (no
// padding is computed), as ModernBERT's own unpadded path runs; positions restart at 0 for every
// sequence. A query whose whole window is masked (an interior run of attention-mask zeros) weighs
// every key of its sequence equally, as transformers' finfo.min masks give.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/compute_pool.h"
#include "engine/core/tensor.h"
#include "engine/models/encoder/encoder_network.h"
#include "nlohmann/json_fwd.hpp"

namespace sluice::engine::models::encoder {

struct ArchSpec;
struct PackedBatch;
class EncoderWorkspace;

// ModernBERT's own config.json fields (after the common ones: sizes, hidden_activation, norm_eps):
// norm_bias, attention_bias, mlp_bias, classifier_bias, global_rope_theta, local_rope_theta,
// global_attn_every_n_layers, local_attention, classifier_pooling, classifier_activation, with
// ModernBertConfig's defaults where absent; fills net.layer_plans and the rope tables' thetas.
// InvalidArgument naming `path` and the field.
absl::Status ReadModernBertConfig(const nlohmann::json& json, const std::string& path,
                                  EncoderNetwork& net);

// Reads one tensor (the encoder's, or a head's when `head`) checked against `shape`, as FP32.
using TensorReader = absl::FunctionRef<absl::StatusOr<std::vector<float>>(
    const std::string& name, const Shape& shape, bool head)>;

// The weights of a ModernBERT checkpoint (after ReadModernBertConfig and the heads' description),
// the four linear layers of every layer packed in net.weight_format, and the rope tables.
absl::Status ReadModernBertWeights(TensorReader read, const ArchSpec& spec, EncoderNetwork& net);

// The word embeddings (spec.word_embeddings, [vocab_size, hidden]) into net.word_embeddings, held
// in 16 bits where net.hold_16bit_weights: ModernBERT's and Qwen3's first tensor.
absl::Status ReadWordEmbeddings(TensorReader read, const ArchSpec& spec, EncoderNetwork& net);

// transformers' default rope in FP32 into `table` (its theta set): [positions, head_size / 2].
void FillRopeTable(RopeTable& table, int positions, int head_size);

// The FP32 bytes of a ModernBERT network's weights (EncoderNetwork::weight_bytes).
int64_t ModernBertWeightBytes(const EncoderNetwork& net);

// The forward pass of a network whose layers are pre-norm (layer_plans[0].pre_norm): as
// encoder_forward.h's Forward, which calls it (same chunking, pool and determinism contract).
void ForwardPreNorm(const EncoderNetwork& net, const PackedBatch& batch, EncoderWorkspace& ws,
                    int64_t chunk_tokens, ComputePool* pool);

// ModernBertForSequenceClassification's logits after Forward: pool `hidden` ([tokens, H]) per
// classifier_pooling into pooled [S, H], head.dense + act + head.norm into `scratch` [S, H], then
// the classifier into out [S, num_labels].
void ModernBertLogits(const EncoderNetwork& net, const PackedBatch& batch, const float* hidden,
                      float* pooled, float* scratch, float* out);

}  // namespace sluice::engine::models::encoder
