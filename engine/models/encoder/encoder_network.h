#pragma once

// The network of a BERT-family encoder, read from a Hugging Face checkpoint folder as
// save_pretrained() and sentence-transformers write it:
//
//   config.json                 model_type (bert, roberta, xlm-roberta, distilbert, mpnet,
//                               modernbert, qwen3), sizes,
//                               hidden_act, eps... (DistilBERT's own keys: dim, n_layers...)
//   model.safetensors           the weights (F32, F16 or BF16), with or without the "bert." /
//                               "roberta." / "distilbert." / "mpnet." prefix that task-head
//                               checkpoints add
//   modules.json                (optional) sentence-transformers' module list, in order:
//                               Transformer, Pooling, Dense..., Normalize (others refused by name)
//   1_Pooling/config.json       (optional) the pooling modes; CLS when there is none
//   2_Dense/config.json         (optional, one folder per Dense module) in/out features, bias,
//     + model.safetensors       activation; `linear.weight` [out, in], `linear.bias` [out]
//
// FP32 weights (except where said: a BF16 or FP16 checkpoint's linear layers and word embeddings
// are held in their 16 bits, PackFormat and EmbeddingTable) in PyTorch's own layouts (nn.Linear's
// [out_features, in_features], row-major), with
// the query, key and value projections of each layer concatenated into one [3 x hidden, hidden]
// matrix at load so that one GEMM computes all three; except the four linear layers of every
// encoder layer, which are packed at load into the CPU GEMM's panel layout (encoder_gemm.h:
// PackedWeights, held instead of the row-major copy, not beside it; PackedWeights::Unpack gives
// the row-major form back to a backend that needs it). The CPU forward pass (encoder_forward.h)
// computes with them directly. Immutable once loaded; shared read-only by every instance.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/data_type.h"
#include "engine/models/encoder/encoder_gemm.h"

namespace sluice::engine::models::encoder {

// The architectures differ in config.json's keys, the tensors' names and the heads (described as
// data in encoder_arch.h's table); the layers compute the same post-LayerNorm block, except
// ModernBERT's (pre-norm, rotary, GeGLU, sliding windows: EncoderNetwork::layer_plans).
enum class EncoderArch {
  kBert,     // model_type "bert": positions 0..n-1, token types
  kRoberta,  // "roberta", "xlm-roberta": positions offset by pad_token_id + 1, pads at pad_token_id
  kDistilbert,  // "distilbert": positions 0..n-1, no token types, LayerNorm eps fixed at 1e-12
  kMpnet,  // "mpnet": RoBERTa's positions (padding index 1), no token types, relative position bias
  // "modernbert": no position table (rotary), pre-LayerNorm layers, GeGLU, alternating global and
  // sliding-window attention, optional biases (encoder_modernbert.h)
  kModernbert,
  // "qwen3": a decoder served as an embedder (Qwen3-Embedding): causal attention, RMSNorm, grouped
  // query attention with per-head q/k RMSNorm, rotary embeddings, SwiGLU (encoder_qwen3.h)
  kQwen3,
};

// config.json's hidden_act. The two GELU forms differ by up to ~1e-3 and are never swapped.
enum class HiddenActivation {
  kGeluErf,   // "gelu": x/2 (1 + erf(x / sqrt 2)), as torch.nn.functional.gelu
  kGeluTanh,  // "gelu_new", "gelu_pytorch_tanh", "gelu_fast": the tanh approximation
  kRelu,      // "relu"
  kSilu,      // "silu": x sigmoid(x) (Qwen3's SwiGLU only; the BERT-family kernels refuse it)
};

// Pooling modes of 1_Pooling/config.json, in the order sentence-transformers concatenates them.
struct PoolingModes {
  bool cls = false;
  bool max = false;
  bool mean = false;
  bool mean_sqrt_len = false;
  // Mean weighted by position (token t of a sequence counts t + 1), as SGPT's models pool.
  bool weightedmean = false;
  // The last attended token (a decoder's summary: Qwen3-Embedding, e5-mistral).
  bool lasttoken = false;
  int count() const { return cls + max + mean + mean_sqrt_len + weightedmean + lasttoken; }
};

// The activation of a sentence-transformers Dense module (its config's activation_function).
enum class DenseActivation { kIdentity, kTanh, kRelu, kSigmoid, kGelu };

// A sentence-transformers Dense module after pooling: y = activation(W x + b).
struct DenseLayer {
  std::string path;  // the module's folder, relative to the checkpoint's (modules.json's path)
  int in_features = 0;
  int out_features = 0;
  bool has_bias = true;
  std::vector<float> weight;  // [out_features, in_features]
  std::vector<float> bias;    // [out_features], empty without a bias
  DenseActivation activation = DenseActivation::kTanh;
};

enum class ClassifierKind {
  kNone,
  kBert,        // classifier.{weight,bias} on pooler_output
  kRoberta,     // classifier.dense + tanh + classifier.out_proj on the first token's hidden state
  kDistilbert,  // pre_classifier + ReLU + classifier on the first token's hidden state
  // ModernBertForSequenceClassification: the first token's or the mean hidden state
  // (classifier_pooling), head.dense + classifier_activation + head.norm, then classifier
  kModernbert,
  // Qwen3ForSequenceClassification: score (no bias) on the hidden state of the last token whose id
  // is not pad_token_id (the last token without one), as transformers'
  // GenericForSequenceClassification
  kQwen3Score,
};

// How one encoder layer computes, as data: the CPU forward pass executes it (encoder_forward.cc
// for post-norm layers, encoder_modernbert.cc for pre-norm ones), a GPU port reads the same. The
// default is BERT's layer.
struct LayerPlan {
  // false: BERT's post-LayerNorm (x = LN(x + f(x)) after attention and after the MLP); true:
  // pre-LayerNorm (x = x + f(LN(x))), the network's final_norm after the last layer.
  bool pre_norm = false;
  // pre_norm: whether attention's input is normed (ModernBERT's layer 0 has an Identity there).
  bool attention_norm = true;
  // GLU MLP: the intermediate projection gives [2I], act(first I) * (last I) (GeGLU).
  bool gated_mlp = false;
  // Rotary position embedding of queries and keys: an index into EncoderNetwork::rope_tables; -1
  // for none (the embeddings add learned absolute positions).
  int rope_table = -1;
  // Sliding-window attention: a query attends to keys with |key - query| <= window; 0: every key.
  int window = 0;
  // Qwen3 (encoder_qwen3.cc runs these): RMSNorm instead of LayerNorm (weight only, eps
  // layer_norm_eps, in FP32); causal attention (a query sees the keys at and before it, within its
  // sequence); per-head RMSNorm of queries and keys (q_norm, k_norm [head_size]) before rotary;
  // the gated MLP's activation is EncoderNetwork::activation (SwiGLU: down(silu(gate) * up)).
  bool rms_norm = false;
  bool causal = false;
  bool qk_norm = false;
};

// cos and sin of rotary position p and frequency i ([positions, head_size / 2] each, row p), as
// transformers computes them in FP32: inv_freq[i] = 1 / theta^(2i / d), angle = p * inv_freq[i].
struct RopeTable {
  double theta = 0;
  std::vector<float> cos;
  std::vector<float> sin;
};

struct EncoderLayer {
  // Biases and LayerNorm betas a checkpoint lacks (ModernBERT's attention_bias, mlp_bias,
  // norm_bias false) are empty (a GEMM without bias) or zeros (a LayerNorm's beta). A gated MLP's
  // intermediate_weight is [2I, H] (input rows, then gate rows).
  PackedWeights qkv_weight;                 // [3H, H]: query rows, then key rows, then value rows
  std::vector<float> qkv_bias;              // [3H]
  PackedWeights attention_out_weight;       // [H, H]
  std::vector<float> attention_out_bias;    // [H]
  std::vector<float> attention_norm_gamma;  // [H]
  std::vector<float> attention_norm_beta;   // [H]
  PackedWeights intermediate_weight;        // [I, H]
  std::vector<float> intermediate_bias;     // [I]
  PackedWeights output_weight;              // [H, I]
  std::vector<float> output_bias;           // [H]
  std::vector<float> output_norm_gamma;     // [H]
  std::vector<float> output_norm_beta;      // [H]
  // Qwen3's q_norm and k_norm weights ([head_size] each; empty without LayerPlan::qk_norm).
  std::vector<float> query_norm_gamma;
  std::vector<float> key_norm_gamma;
};

// A table of vectors looked up by id (the word embeddings; Qwen3-0.6B's are 151,669 x 1,024),
// held as compactly as its values allow: in 16 bits where every value is exactly a BF16 or FP16
// value (a checkpoint stored so: ExactFp32Storage), widened per lookup, else in FP32. A model's
// `precision` bf16 or int8 holds it in BF16 (InPrecision).
class EmbeddingTable {
 public:
  EmbeddingTable() = default;
  // [rows, cols] row-major values; held in FP32 without `compact`.
  static EmbeddingTable Hold(std::vector<float> values, int64_t rows, int cols,
                             bool compact = true);
  // `table` as a network whose linear layers are packed in `network_format` holds it: for a
  // model's `precision` bf16 (kBf16, kFp32HeldBf16) or int8 (kInt8), each value rounded to the
  // nearest BF16 and held so (half FP32's bytes); any other format: `table` as it is. So that the
  // whole model, not only its linear layers, takes the precision's memory (the word embeddings are
  // a fifth of BERT-base's FP32 bytes). Not INT8 for int8: per-row INT8 embeddings (measured)
  // took a MiniLM reranker's Spearman correlation to FP32 from 0.9911 to 0.9899, under the 0.99
  // bar, for 22 MiB of BERT-base's 141.
  static EmbeddingTable InPrecision(EmbeddingTable table, WeightFormat network_format);

  int64_t rows() const { return rows_; }
  int cols() const { return cols_; }
  bool empty() const { return rows_ == 0; }
  // kFp32, kFp32HeldBf16 or kFp32HeldFp16.
  WeightFormat format() const { return format_; }
  int64_t bytes() const;
  // Row `id` (REQUIRES 0 <= id < rows()) as FP32 into out[0, cols()).
  void CopyRow(int64_t id, float* out) const;
  // The whole table in FP32 (a backend that uploads it).
  std::vector<float> Widened() const;

 private:
  int64_t rows_ = 0;
  int cols_ = 0;
  WeightFormat format_ = WeightFormat::kFp32;
  std::vector<float> fp32_;
  std::vector<uint16_t> held_;
};

// The activation of the `score` output (EncoderNetwork::score_activation).
enum class ScoreActivation { kSigmoid, kSoftmax, kIdentity };

struct EncoderNetwork {
  // From config.json.
  std::string model_type;  // as written: "bert", "roberta", "xlm-roberta", "distilbert", ...
  EncoderArch arch = EncoderArch::kBert;
  int hidden = 0;
  int layers = 0;
  int heads = 0;
  // Grouped-query attention (Qwen3's num_key_value_heads; 0: one key/value head per query head)
  // and an explicit head size (Qwen3's head_dim; 0: hidden / heads).
  int kv_heads = 0;
  int head_dim = 0;
  int intermediate = 0;
  HiddenActivation activation = HiddenActivation::kGeluErf;
  std::string activation_name;  // as written in config.json
  float layer_norm_eps = 1e-12f;
  int vocab_size = 0;
  int max_position_embeddings = 0;
  int type_vocab_size = 0;
  int pad_token_id = 0;
  // Qwen3: config.json's pad_token_id as written (-1: null or absent), which its score head reads.
  int score_pad_token_id = -1;

  // The longest sequence the position table allows: max_position_embeddings for BERT, minus
  // pad_token_id + 1 for RoBERTa (whose positions start after the padding index).
  int max_sequence_length = 0;
  // Position id of a sequence's first token: 0 for BERT, pad_token_id + 1 for RoBERTa.
  int position_offset = 0;
  // RoBERTa's positions (position_offset > 0): pads at pad_token_id, the others counting on from
  // pad_token_id + 1, as create_position_ids_from_input_ids.
  bool positions_after_pad() const { return position_offset > 0; }
  // Whether requests may carry token_type_ids (type_vocab_size > 1).
  bool has_token_types() const { return type_vocab_size > 1; }

  EmbeddingTable word_embeddings;          // [vocab, H]
  std::vector<float> position_embeddings;  // [max_position_embeddings, H]
  std::vector<float> type_embeddings;      // [type_vocab_size, H]
  std::vector<float> embedding_norm_gamma;
  std::vector<float> embedding_norm_beta;
  std::vector<EncoderLayer> encoder_layers;
  // MPNet (empty otherwise): the relative position bias every layer adds to its attention scores,
  // by head and key - query: [heads, 2 * max_sequence_length - 1], entry (h, key - query +
  // max_sequence_length - 1) = relative_attention_bias.weight[bucket(key - query), h], with
  // MPNetEncoder.relative_position_bucket's 32 buckets (it passes 32 whatever config.json's
  // relative_attention_num_buckets, which sizes the table: at least 32).
  std::vector<float> relative_position_bias;
  int relative_attention_buckets = 0;
  // How each layer computes ([layers]; read with config.json, so that a description without the
  // weights tells a GPU backend what it would have to run).
  std::vector<LayerPlan> layer_plans;
  // Which optional parameters the checkpoint has: ModernBERT's attention_bias (Wqkv, Wo),
  // mlp_bias (Wi, Wo), norm_bias (every LayerNorm's beta) and classifier_bias (head.dense); the
  // other architectures have them all.
  bool attention_biases = true;
  bool mlp_biases = true;
  bool norm_biases = true;
  bool classifier_dense_bias_present = true;
  // Rotary tables the layers' plans index (ModernBERT: global_rope_theta and local_rope_theta),
  // [max_sequence_length, head_size / 2] each.
  std::vector<RopeTable> rope_tables;
  // Pre-norm networks: the LayerNorm after the last layer (ModernBERT's final_norm).
  std::vector<float> final_norm_gamma;
  std::vector<float> final_norm_beta;

  // pooler.dense (empty without): pooler_output = tanh(W h[CLS] + b).
  std::vector<float> pooler_weight;  // [H, H]
  std::vector<float> pooler_bias;    // [H]
  bool has_pooler() const { return !pooler_weight.empty(); }

  ClassifierKind classifier = ClassifierKind::kNone;
  int num_labels = 0;
  std::vector<float> classifier_dense_weight;  // RoBERTa: dense; DistilBERT: pre_classifier [H, H]
  std::vector<float> classifier_dense_bias;
  std::vector<float> classifier_weight;  // [num_labels, H] (RoBERTa: out_proj)
  std::vector<float> classifier_bias;    // [num_labels]
  // ModernBERT's head: classifier_pooling "mean" (else the first token), the activation between
  // head.dense and head.norm (classifier_activation), head.norm's parameters (beta zeros without
  // norm_bias); classifier_dense_bias empty without classifier_bias.
  bool classifier_mean_pooling = false;
  HiddenActivation classifier_activation = HiddenActivation::kGeluErf;
  std::vector<float> classifier_norm_gamma;
  std::vector<float> classifier_norm_beta;
  // id2label of config.json, by label index (empty where it names none).
  std::vector<std::string> labels;
  // How the `score` output turns logits into scores, as sentence-transformers' CrossEncoder does:
  // config.json's `sentence_transformers.activation_fn` when it names Sigmoid, Softmax or
  // Identity; else Sigmoid for one label (a reranker) and Softmax for several (a classifier).
  ScoreActivation score_activation = ScoreActivation::kSigmoid;
  // The activation config.json names, if any (read before the head's label count is known).
  std::optional<ScoreActivation> explicit_score_activation;

  // Sentence-embedding head (the `embedding` output): pooling modes, Dense modules in order, L2
  // normalisation, as sentence-transformers runs them.
  PoolingModes pooling;
  std::vector<DenseLayer> dense;
  bool normalize = false;

  // The precision of the checkpoint's weights when they all share one (kFp16, kBf16: the FP32
  // arrays hold exactly those values widened), kFp32 otherwise. A GPU backend computes in it.
  DataType stored_dtype = DataType::kFp32;
  // Bytes of the FP32 arrays above (for load limits and the memory figures), as if every weight
  // were FP32 (the BF16 layers' weights take half of theirs).
  int64_t weight_bytes = 0;
  // How the four linear layers of every encoder layer are packed (EncoderLoadOptions::
  // weight_format: kBf16 for a model's `precision: bf16`); kFp32: each matrix as PackFormat says.
  WeightFormat weight_format = WeightFormat::kFp32;
  // EncoderLoadOptions::hold_16bit_weights.
  bool hold_16bit_weights = true;

  int head_size() const { return head_dim > 0 ? head_dim : hidden / heads; }
  int key_value_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  // Width of a token's fused query, key and value row, and of its attention context.
  int qkv_width() const { return (heads + 2 * key_value_heads()) * head_size(); }
  int context_width() const { return heads * head_size(); }
  // What pooling concatenates, and what the Dense modules (if any) make of it.
  int pooled_size() const { return hidden * pooling.count(); }
  int full_embedding_size() const {
    return dense.empty() ? pooled_size() : dense.back().out_features;
  }
  // Matryoshka truncation (the model's `dimensions` parameter): the first truncate_dim values of
  // the full embedding, L2-normalised again when the model normalises. 0: the full embedding.
  int truncate_dim = 0;
  int embedding_size() const { return truncate_dim > 0 ? truncate_dim : full_embedding_size(); }
};

struct EncoderLoadOptions {
  // The L2 normalisation of `embedding`: absent = as modules.json says (a Normalize module).
  std::optional<bool> normalize;
  // Largest tensor element count accepted before conversion (a bound on what a broken or hostile
  // config.json / header can make the load allocate).
  int64_t max_weight_bytes = int64_t{16} << 30;
  // How the encoder layers' four linear layers are packed for the CPU GEMM: kBf16 (the model's
  // `precision: bf16`; REQUIRES gemm::Bf16Supported() to run it) rounds them to BF16 at load.
  WeightFormat weight_format = WeightFormat::kFp32;
  // Whether weights that are all exactly BF16 or FP16 values (a checkpoint stored so) are held in
  // those 16 bits (PackFormat, EmbeddingTable): the same results in half the memory. false widens
  // them to FP32 at load (the benchmarks' and tests' comparison).
  bool hold_16bit_weights = true;
  // The model's `dimensions` parameter (Matryoshka truncation of `embedding`); 0: none.
  // InvalidArgument at load when it exceeds the embedding's size.
  int dimensions = 0;
};

// Reads config.json and the sentence-transformers files of `folder` without the weights: the
// sizes, the architecture, pooling and normalisation, and which heads the weights hold (from the
// safetensors header). Cheap; config completion uses it. Errors as LoadEncoderNetwork.
absl::StatusOr<std::shared_ptr<EncoderNetwork>> ReadEncoderDescription(
    const std::string& folder, const EncoderLoadOptions& options);

// Reads the whole checkpoint of `folder`. NotFound for a missing config.json or model.safetensors;
// InvalidArgument for anything else, the message naming the file and field, or the tensor and both
// shapes ("tensor 'encoder.layer.0.attention.self.query.weight' has shape [32,16], config.json
// needs [32,32]"); an unsupported model_type or hidden_act is named.
absl::StatusOr<std::shared_ptr<const EncoderNetwork>> LoadEncoderNetwork(
    const std::string& folder, const EncoderLoadOptions& options);

// The format a linear layer's weights `w` are packed in: the network's weight_format, except that
// the FP32 product holds weights that are all exactly BF16 or FP16 values (a checkpoint stored in
// that format) in those 16 bits rather than widened (ExactFp32Storage: the same results, half the
// memory).
WeightFormat PackFormat(const EncoderNetwork& net, const std::vector<float>& w);

// "gelu" -> kGeluErf etc.; InvalidArgument listing the supported names.
absl::StatusOr<HiddenActivation> ParseHiddenActivation(const std::string& name);

}  // namespace sluice::engine::models::encoder
