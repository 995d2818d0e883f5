#pragma once

// Qwen3 (model_type "qwen3": Qwen3-Embedding-0.6B and the larger sizes, which differ only in
// config.json's numbers) as an embedder in the CPU encoder: a decoder run once over each whole
// sequence, its layers described as data (EncoderNetwork::layer_plans: pre-norm, RMSNorm, causal,
// q/k norm, gated MLP, rotary table) so that a GPU port reads the same description.
//
// Numerics as transformers' Qwen3Model in FP32 (eval, eager attention): x = embed_tokens[id]; per
// layer, x += o_proj(attention(rotary(k_norm(k_proj(n))), rotary(q_norm(q_proj(n))), v_proj(n)))
// with n = input_layernorm(x), then x += down_proj(silu(gate_proj(m)) * up_proj(m)) with m =
// post_attention_layernorm(x); norm at the end. Every RMSNorm is weight * (x * rsqrt(mean(x^2) +
// eps)) in FP32 (Qwen3RMSNorm), q_norm and k_norm per head over head_dim. Attention is causal
// within each packed sequence (a query sees its own and earlier keys, attention-mask zeros
// excluded), grouped (query head h reads key/value head h / (heads / kv_heads)), scaled by
// head_dim^-1/2; positions restart at 0 for every sequence (as transformers' position_ids =
// arange(len) whatever the mask). A query that sees no attended key (leading attention-mask
// zeros, as left padding gives) weighs every key of its sequence equally, as transformers' eager
// finfo.min masks give. The GEMMs are PackedGemm's (so `precision: bf16` applies).

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/compute_pool.h"
#include "engine/models/encoder/encoder_modernbert.h"
#include "engine/models/encoder/encoder_network.h"
#include "nlohmann/json_fwd.hpp"

namespace sluice::engine::models::encoder {

struct ArchSpec;
struct PackedBatch;
class EncoderWorkspace;

// config.json's hidden_act for a Qwen3 network: "silu" only; InvalidArgument naming the others.
absl::StatusOr<HiddenActivation> Qwen3Activation(const std::string& name);

// Qwen3's own config.json fields (after the common ones): num_key_value_heads, head_dim (not
// derived: Qwen3 configs set 128 where hidden / heads is 64), rope_theta, attention_bias;
// rope_scaling must be null, use_sliding_window false (each refused naming the field). Fills
// net.layer_plans and the rope table's theta. InvalidArgument naming `path` and the field.
absl::Status ReadQwen3Config(const nlohmann::json& json, const std::string& path,
                             EncoderNetwork& net);

// The weights of a Qwen3 checkpoint (Qwen3Model's names, or with the "model." prefix of
// Qwen3ForCausalLM / ForSequenceClassification; lm_head.weight is ignored): q/k/v projections
// packed as one [(heads + 2 kv_heads) head_dim, H] GEMM, gate and up as one [2I, H], in
// net.weight_format; the rope table.
absl::Status ReadQwen3Weights(TensorReader read, const ArchSpec& spec, EncoderNetwork& net);

// The FP32 bytes of a Qwen3 network's weights (EncoderNetwork::weight_bytes).
int64_t Qwen3WeightBytes(const EncoderNetwork& net);

// The forward pass of a network whose layers are causal (layer_plans[0].causal): as
// encoder_forward.h's Forward, which calls it (same chunking, pool and determinism contract).
void ForwardDecoder(const EncoderNetwork& net, const PackedBatch& batch, EncoderWorkspace& ws,
                    int64_t chunk_tokens, ComputePool* pool);

// Qwen3ForSequenceClassification's logits after Forward: out [S, num_labels] = score(hidden of
// each sequence's last token whose id is not score_pad_token_id; its last token where there is
// none; its first where every id is the pad, as transformers' argmax of zeros gives).
void Qwen3Logits(const EncoderNetwork& net, const PackedBatch& batch, const float* hidden,
                 float* out);

}  // namespace sluice::engine::models::encoder
