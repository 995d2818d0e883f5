#pragma once

// What distinguishes the encoder architectures, as data: the config.json keys of their sizes, the
// names of their tensors, how their positions count and whether they have token types (and for
// ModernBERT and Qwen3, EncoderNetwork::layer_plans: how each layer computes). The
// loader (encoder_network.cc) reads every architecture with one code path over this table; the
// forward pass sees only EncoderNetwork's flags (positions offset, token types, head kind).

#include <string>

#include "engine/models/encoder/encoder_network.h"

namespace sluice::engine::models::encoder {

struct ArchSpec {
  EncoderArch arch;
  // config.json keys. The defaults are transformers' common names (BERT's, and most others');
  // DistilBERT's are dim, n_layers, n_heads, hidden_dim, activation.
  const char* hidden_key = "hidden_size";
  const char* layers_key = "num_hidden_layers";
  const char* heads_key = "num_attention_heads";
  const char* intermediate_key = "intermediate_size";
  const char* activation_key = "hidden_act";
  // The config.json key of the LayerNorm eps; nullptr where the code fixes it (DistilBERT: 1e-12).
  const char* layer_norm_eps_key = "layer_norm_eps";
  // The eps when config.json gives none (BertConfig's default).
  float default_layer_norm_eps = 1e-12f;
  // Whether the embeddings add token types (type_vocab_size; none: no token_type_ids input).
  bool token_types = false;
  // RoBERTa's positions: pads at the padding index, the others from padding index + 1.
  bool positions_after_pad = false;
  // The padding index of the positions when the code fixes it (MPNetEmbeddings: 1, whatever
  // config.json's pad_token_id); -1: config.json's pad_token_id.
  int fixed_padding_idx = -1;
  // MPNet: a relative position bias (T5's buckets) added to every layer's attention scores, from
  // "encoder.relative_attention_bias.weight" [relative_attention_num_buckets, heads].
  bool relative_attention_bias = false;
  // ModernBERT: no position table (rotary positions), pre-norm GeGLU layers with a fused Wqkv and
  // optional biases, alternating global and sliding-window attention: config and weights are read
  // by encoder_modernbert.cc over this table's names.
  bool modernbert = false;
  // Qwen3: a decoder as an embedder (causal attention, RMSNorm, grouped queries with an explicit
  // head_dim, q/k norms, rotary, SwiGLU): config and weights read by encoder_qwen3.cc over this
  // table's names (query/key/value/attention_out: q/k/v/o_proj; intermediate: gate_proj, with
  // up_proj beside it; output: down_proj).
  bool qwen3 = false;
  // Tensor names have no default: every architecture names its own (a spec that left one out
  // would hand the loader a null name).
  // The prefix a task model (…ForSequenceClassification) puts before the encoder's tensors.
  const char* task_prefix;
  // The word embeddings' tensor (also how the loader tells a task model's prefix).
  const char* word_embeddings;
  // Tensor names: layer l's are layer_prefix + l + "." + name (+ ".weight" / ".bias").
  const char* layer_prefix;
  const char* query;  // ModernBERT: the fused query, key and value projection
  const char* key;
  const char* value;
  const char* attention_out;
  const char* attention_norm;
  const char* intermediate;
  const char* output;
  const char* output_norm;
};

// The entry of config.json's model_type; nullptr for an architecture the backend does not serve.
const ArchSpec* FindArch(const std::string& model_type);

// The model types FindArch knows, for error messages: "bert, distilbert, mpnet, roberta, ...".
const char* SupportedModelTypes();

}  // namespace sluice::engine::models::encoder
