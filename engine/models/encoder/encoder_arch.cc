#include "engine/models/encoder/encoder_arch.h"

namespace sluice::engine::models::encoder {
namespace {

// transformers' modeling_bert.py / modeling_roberta.py: BertLayer's names.
constexpr ArchSpec kBertSpec{
    .arch = EncoderArch::kBert,
    .token_types = true,
    .task_prefix = "bert.",
    .word_embeddings = "embeddings.word_embeddings.weight",
    .layer_prefix = "encoder.layer.",
    .query = "attention.self.query",
    .key = "attention.self.key",
    .value = "attention.self.value",
    .attention_out = "attention.output.dense",
    .attention_norm = "attention.output.LayerNorm",
    .intermediate = "intermediate.dense",
    .output = "output.dense",
    .output_norm = "output.LayerNorm",
};

constexpr ArchSpec WithRobertaPositions(ArchSpec spec) {
  spec.arch = EncoderArch::kRoberta;
  spec.positions_after_pad = true;
  spec.task_prefix = "roberta.";
  return spec;
}
constexpr ArchSpec kRobertaSpec = WithRobertaPositions(kBertSpec);

// modeling_distilbert.py: Embeddings (word + position, no token types, LayerNorm eps 1e-12),
// TransformerBlock (q_lin/k_lin/v_lin/out_lin, sa_layer_norm, ffn.lin1/lin2, output_layer_norm:
// post-LayerNorm as BERT's layer).
constexpr ArchSpec kDistilbertSpec{
    .arch = EncoderArch::kDistilbert,
    .hidden_key = "dim",
    .layers_key = "n_layers",
    .heads_key = "n_heads",
    .intermediate_key = "hidden_dim",
    .activation_key = "activation",
    .layer_norm_eps_key = nullptr,
    .task_prefix = "distilbert.",
    .word_embeddings = "embeddings.word_embeddings.weight",
    .layer_prefix = "transformer.layer.",
    .query = "attention.q_lin",
    .key = "attention.k_lin",
    .value = "attention.v_lin",
    .attention_out = "attention.out_lin",
    .attention_norm = "sa_layer_norm",
    .intermediate = "ffn.lin1",
    .output = "ffn.lin2",
    .output_norm = "output_layer_norm",
};

// modeling_mpnet.py: MPNetEmbeddings (word + position with RoBERTa's positions, padding index 1,
// no token types), MPNetLayer (attention.attn.{q,k,v,o}, attention.LayerNorm, then BERT's
// intermediate/output), MPNetEncoder's relative_attention_bias shared by every layer.
constexpr ArchSpec kMpnetSpec{
    .arch = EncoderArch::kMpnet,
    .positions_after_pad = true,
    .fixed_padding_idx = 1,
    .relative_attention_bias = true,
    .task_prefix = "mpnet.",
    .word_embeddings = "embeddings.word_embeddings.weight",
    .layer_prefix = "encoder.layer.",
    .query = "attention.attn.q",
    .key = "attention.attn.k",
    .value = "attention.attn.v",
    .attention_out = "attention.attn.o",
    .attention_norm = "attention.LayerNorm",
    .intermediate = "intermediate.dense",
    .output = "output.dense",
    .output_norm = "output.LayerNorm",
};

// modeling_modernbert.py: ModernBertEmbeddings (tok_embeddings + norm, no positions: rotary),
// ModernBertEncoderLayer (attn_norm, attn.Wqkv fused, attn.Wo, mlp_norm, mlp.Wi [input, gate],
// mlp.Wo), final_norm; ModernBertForSequenceClassification's "model." prefix. Its LayerNorm eps
// is config.json's norm_eps (1e-5 by default).
constexpr ArchSpec kModernbertSpec{
    .arch = EncoderArch::kModernbert,
    .activation_key = "hidden_activation",
    .layer_norm_eps_key = "norm_eps",
    .default_layer_norm_eps = 1e-5f,
    .modernbert = true,
    .task_prefix = "model.",
    .word_embeddings = "embeddings.tok_embeddings.weight",
    .layer_prefix = "layers.",
    .query = "attn.Wqkv",
    .key = "attn.Wqkv",
    .value = "attn.Wqkv",
    .attention_out = "attn.Wo",
    .attention_norm = "attn_norm",
    .intermediate = "mlp.Wi",
    .output = "mlp.Wo",
    .output_norm = "mlp_norm",
};

// modeling_qwen3.py: Qwen3Model (embed_tokens, layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
// self_attn.{q,k}_norm, post_attention_layernorm, mlp.{gate,up,down}_proj}, norm);
// Qwen3ForCausalLM's and Qwen3ForSequenceClassification's "model." prefix. RMSNorm eps:
// rms_norm_eps (1e-6 by default).
constexpr ArchSpec kQwen3Spec{
    .arch = EncoderArch::kQwen3,
    .layer_norm_eps_key = "rms_norm_eps",
    .default_layer_norm_eps = 1e-6f,
    .qwen3 = true,
    .task_prefix = "model.",
    .word_embeddings = "embed_tokens.weight",
    .layer_prefix = "layers.",
    .query = "self_attn.q_proj",
    .key = "self_attn.k_proj",
    .value = "self_attn.v_proj",
    .attention_out = "self_attn.o_proj",
    .attention_norm = "input_layernorm",
    .intermediate = "mlp.gate_proj",
    .output = "mlp.down_proj",
    .output_norm = "post_attention_layernorm",
};

}  // namespace

const ArchSpec* FindArch(const std::string& model_type) {
  if (model_type == "bert") return &kBertSpec;
  if (model_type == "roberta" || model_type == "xlm-roberta") return &kRobertaSpec;
  if (model_type == "distilbert") return &kDistilbertSpec;
  if (model_type == "mpnet") return &kMpnetSpec;
  if (model_type == "modernbert") return &kModernbertSpec;
  if (model_type == "qwen3") return &kQwen3Spec;
  return nullptr;
}

const char* SupportedModelTypes() {
  return "bert, distilbert, modernbert, mpnet, qwen3, roberta, xlm-roberta";
}

}  // namespace sluice::engine::models::encoder
