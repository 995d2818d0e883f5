#include "engine/models/encoder/encoder_qwen3.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/models/encoder/encoder_arch.h"
#include "engine/models/encoder/encoder_config_json.h"
#include "engine/models/encoder/encoder_forward.h"
#include "engine/models/encoder/encoder_forward_steps.h"
#include "engine/models/encoder/encoder_gemm.h"
#include "engine/models/encoder/encoder_kernels.h"
#include "nlohmann/json.hpp"

// Why a file of its own rather than more flags in encoder_modernbert.cc's ForwardPreNorm: the
// decoder's attention differs in shape (grouped heads, an explicit head size, so the QKV row is
// not 3H wide) and in mask (causal), its norms are RMSNorms and its MLP's halves are in the
// other order; folded into one loop, every step would branch on the architecture. The plan
// (LayerPlan) stays shared: a GPU port reads the same flags for both.

namespace sluice::engine::models::encoder {
namespace {

// Queries per block of a sequence's attention (as encoder_modernbert.cc's): the scratch holds one
// block's scores against the keys it may see.
constexpr int kQueryBlock = 128;

// Qwen3Config's defaults (configuration_qwen3.py).
constexpr double kRopeTheta = 10000.0;
constexpr int64_t kHeadDim = 128;

// Qwen3's tensor names that ArchSpec has no slot for (Qwen3MLP's up_proj, Qwen3Attention's
// per-head norms, Qwen3Model's final norm).
constexpr char kUp[] = "mlp.up_proj";
constexpr char kQueryNorm[] = "self_attn.q_norm";
constexpr char kKeyNorm[] = "self_attn.k_norm";
constexpr char kFinalNorm[] = "norm.weight";

// Qwen3RMSNorm of `rows` rows of width n (stride ld) from `in` into `out` (may alias):
// weight * (x * rsqrt(mean(x^2) + eps)), in FP32.
void RmsNorm(const float* in, int64_t ld_in, int64_t rows, int n, const float* weight, float eps,
             float* out, int64_t ld_out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * ld_in;
    float* y = out + r * ld_out;
    double sum = 0;
    for (int j = 0; j < n; ++j) sum += double{x[j]} * double{x[j]};
    const float variance = static_cast<float>(sum / n);
    const float inv = 1.0f / std::sqrt(variance + eps);
    for (int j = 0; j < n; ++j) y[j] = weight[j] * (x[j] * inv);
  }
}

// q_norm / k_norm per head, then rotary (rotate_half), on `rows` QKV rows of width
// net.qkv_width(): the query heads, then the key heads.
void NormAndRotate(const EncoderNetwork& net, const EncoderLayer& layer, const LayerPlan& plan,
                   const int32_t* positions, int64_t rows, float* qkv) {
  const int d = net.head_size();
  const int half = d / 2;
  const int ld = net.qkv_width();
  const float eps = net.layer_norm_eps;
  const RopeTable* table =
      plan.rope_table >= 0 ? &net.rope_tables[static_cast<size_t>(plan.rope_table)] : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = qkv + r * ld;
    const int heads = net.heads + net.key_value_heads();
    for (int head = 0; head < heads; ++head) {
      float* x = row + int64_t{head} * d;
      if (plan.qk_norm) {
        const bool query = head < net.heads;
        RmsNorm(x, d, 1, d, query ? layer.query_norm_gamma.data() : layer.key_norm_gamma.data(),
                eps, x, d);
      }
      if (table == nullptr) continue;
      const float* cos = table->cos.data() + int64_t{positions[r]} * half;
      const float* sin = table->sin.data() + int64_t{positions[r]} * half;
      RotateHalf(x, cos, sin, half);
    }
  }
}

// Causal attention of query head `head` of one sequence (tokens [begin, begin + n) of the chunk),
// reading key/value head head / (heads / kv_heads), by blocks of kQueryBlock queries against the
// keys up to the block's last. Writes its own columns of `context` ([rows, heads x d]) only.
void CausalHeadAttention(const EncoderNetwork& net, const kernels::KernelTable& k,
                         const gemm::GemmKernel& g, const float* qkv, const float* mask_add,
                         int64_t begin, int n, int head, float* scores, float* key_panels,
                         float* value_panels, float* context) {
  const int d = net.head_size();
  const int64_t ld = net.qkv_width();
  const int64_t ldc = net.context_width();
  const int group = net.heads / net.key_value_heads();
  const int kv = head / group;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float* q = qkv + begin * ld + int64_t{head} * d;
  const float* key = qkv + begin * ld + ldc + int64_t{kv} * d;
  const float* v = key + int64_t{net.key_value_heads()} * d;
  const float* mask = mask_add + begin;
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  for (int i0 = 0; i0 < n; i0 += kQueryBlock) {
    const int rows = std::min(kQueryBlock, n - i0);
    const int kn = i0 + rows;  // keys 0 .. the block's last query
    PackPanels(key, ld, kn, d, key_panels);
    PanelGemm(g, q + i0 * ld, ld, rows, key_panels, kn, d, nullptr, scores, kn);
    // A row with no attended key at or before its query ("blind": leading mask zeros) weighs all
    // n keys of the sequence equally (transformers' finfo.min everywhere); its context is the
    // values' mean, written after the product.
    std::array<bool, kQueryBlock> blind{};
    bool any_blind = false;
    int first_attended = n;
    for (int j = 0; j < n; ++j) {
      if (mask[j] == 0.0f) {
        first_attended = j;
        break;
      }
    }
    for (int r = 0; r < rows; ++r) {
      const int i = i0 + r;
      float* row = scores + int64_t{r} * kn;
      std::fill(row + i + 1, row + kn, kMinusInf);
      blind[static_cast<size_t>(r)] = first_attended > i;
      if (blind[static_cast<size_t>(r)]) {
        any_blind = true;
        std::fill(row, row + kn, 0.0f);  // replaced below
      } else {
        k.masked_softmax(row, mask, 1, kn, scale);
      }
    }
    PackTransposedPanels(v, ld, kn, d, value_panels);
    float* out = context + (begin + i0) * ldc + int64_t{head} * d;
    PanelGemm(g, scores, kn, rows, value_panels, d, kn, nullptr, out, ldc);
    for (int r = 0; any_blind && r < rows; ++r) {
      if (!blind[static_cast<size_t>(r)]) continue;
      float* row = out + int64_t{r} * ldc;
      std::fill(row, row + d, 0.0f);
      for (int j = 0; j < n; ++j) {
        for (int c = 0; c < d; ++c) row[c] += v[j * ld + c];
      }
      for (int c = 0; c < d; ++c) row[c] /= static_cast<float>(n);
    }
  }
}

// x[r] += y[r] (+ bias).
void AddResidual(const float* y, const std::vector<float>& bias, int64_t rows, int h, float* x) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * h;
    float* xr = x + r * h;
    for (int j = 0; j < h; ++j)
      xr[j] += yr[j] + (bias.empty() ? 0.0f : bias[static_cast<size_t>(j)]);
  }
}

}  // namespace

absl::StatusOr<HiddenActivation> Qwen3Activation(const std::string& name) {
  if (name == "silu") return HiddenActivation::kSilu;
  return absl::InvalidArgumentError(
      absl::StrCat("'", name, "' is not supported for qwen3 (its SwiGLU MLP: \"silu\" only)"));
}

absl::Status ReadQwen3Config(const Json& json, const std::string& path, EncoderNetwork& net) {
  const auto integer = [&](const char* key, int64_t fallback) -> absl::StatusOr<int64_t> {
    auto it = json.find(key);
    if (it == json.end() || it->is_null()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > (1 << 16)) {
      return FieldError(path, key, "must be a positive integer");
    }
    return it->get<int64_t>();
  };
  ASSIGN_OR_RETURN(const int64_t kv_heads, integer("num_key_value_heads", net.heads));
  ASSIGN_OR_RETURN(const int64_t head_dim, integer("head_dim", kHeadDim));
  if (net.heads % kv_heads != 0) {
    return FieldError(path, "num_key_value_heads",
                      absl::StrCat(kv_heads, " does not divide num_attention_heads ", net.heads));
  }
  if (head_dim % 2 != 0) {
    return FieldError(path, "head_dim",
                      absl::StrCat(head_dim, " is odd: rotary embeddings rotate pairs"));
  }
  net.kv_heads = static_cast<int>(kv_heads);
  net.head_dim = static_cast<int>(head_dim);
  ASSIGN_OR_RETURN(const double theta, PositiveNumberField(json, path, "rope_theta", kRopeTheta));
  if (auto it = json.find("rope_scaling"); it != json.end() && !it->is_null()) {
    std::string type = it->dump();
    if (it->is_object()) {
      auto t = it->find("rope_type");
      if (t == it->end()) t = it->find("type");
      if (t != it->end() && t->is_string()) type = t->get<std::string>();
    }
    return FieldError(path, "rope_scaling",
                      absl::StrCat("'", type, "' is not supported (only null: default rotary)"));
  }
  ASSIGN_OR_RETURN(const bool sliding_window,
                   StrictBoolField(json, path, "use_sliding_window", false));
  ASSIGN_OR_RETURN(const bool attention_bias, StrictBoolField(json, path, "attention_bias", false));
  if (sliding_window) {
    return FieldError(path, "use_sliding_window",
                      "true is not supported (Qwen3's embedders attend to the whole sequence)");
  }
  if (auto it = json.find("layer_types"); it != json.end() && it->is_array()) {
    for (const Json& type : *it) {
      if (!type.is_string() || type.get<std::string>() != "full_attention") {
        return FieldError(path, "layer_types",
                          absl::StrCat("entry ", type.dump(),
                                       " is not supported (only "
                                       "\"full_attention\")"));
      }
    }
  }
  if (auto it = json.find("pad_token_id"); it != json.end() && it->is_number_integer()) {
    net.score_pad_token_id = it->get<int>();
  }
  net.attention_biases = attention_bias;
  net.mlp_biases = false;
  net.norm_biases = false;
  net.classifier_dense_bias_present = false;
  net.rope_tables.assign(1, RopeTable{});
  net.rope_tables[0].theta = theta;
  for (LayerPlan& plan : net.layer_plans) {
    plan.pre_norm = true;
    plan.attention_norm = true;
    plan.gated_mlp = true;
    plan.rope_table = 0;
    plan.window = 0;
    plan.rms_norm = true;
    plan.causal = true;
    plan.qk_norm = true;
  }
  return absl::OkStatus();
}

int64_t Qwen3WeightBytes(const EncoderNetwork& net) {
  const int64_t h = net.hidden;
  const int64_t i = net.intermediate;
  const int64_t d = net.head_size();
  const int64_t qkv = net.qkv_width();
  const int64_t c = net.context_width();
  int64_t floats = int64_t{net.vocab_size} * h + h;  // embed_tokens, norm
  int64_t per_layer = qkv * h + c * h + 2 * h + 2 * d + 3 * i * h;
  if (net.attention_biases) per_layer += qkv + h;
  floats += int64_t{net.layers} * per_layer;
  if (net.classifier != ClassifierKind::kNone) floats += int64_t{net.num_labels} * (h + 1);
  floats += 2 * int64_t{net.max_sequence_length} * (d / 2);  // rope table
  return floats * static_cast<int64_t>(sizeof(float));
}

absl::Status ReadQwen3Weights(TensorReader read, const ArchSpec& spec, EncoderNetwork& net) {
  const int64_t h = net.hidden;
  const int64_t inter = net.intermediate;
  const int64_t d = net.head_size();
  const int64_t qn = int64_t{net.heads} * d;
  const int64_t kvn = int64_t{net.key_value_heads()} * d;
  // Weights of several linear layers stacked by rows and packed as one GEMM; their biases (where
  // `biased`) stacked the same way.
  const auto stacked = [&](const std::string& prefix, std::initializer_list<const char*> parts,
                           std::initializer_list<int64_t> rows, int64_t k, bool biased,
                           PackedWeights& weight, std::vector<float>* bias) -> absl::Status {
    std::vector<float> all;
    int64_t n = 0;
    auto size = rows.begin();
    for (const char* part : parts) {
      ASSIGN_OR_RETURN(std::vector<float> w, read(prefix + part + ".weight", {*size, k}, false));
      all.insert(all.end(), w.begin(), w.end());
      if (biased) {
        ASSIGN_OR_RETURN(std::vector<float> b, read(prefix + part + ".bias", {*size}, false));
        bias->insert(bias->end(), b.begin(), b.end());
      }
      n += *size++;
    }
    weight =
        PackedWeights::Pack(all, static_cast<int>(n), static_cast<int>(k), PackFormat(net, all));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(ReadWordEmbeddings(read, spec, net));
  net.encoder_layers.resize(static_cast<size_t>(net.layers));
  for (int l = 0; l < net.layers; ++l) {
    EncoderLayer& layer = net.encoder_layers[static_cast<size_t>(l)];
    const std::string p = absl::StrCat(spec.layer_prefix, l, ".");
    const bool biased = net.attention_biases;
    ASSIGN_OR_RETURN(layer.attention_norm_gamma,
                     read(p + spec.attention_norm + ".weight", {h}, false));
    layer.qkv_bias.clear();
    RETURN_IF_ERROR(stacked(p, {spec.query, spec.key, spec.value}, {qn, kvn, kvn}, h, biased,
                            layer.qkv_weight, &layer.qkv_bias));
    ASSIGN_OR_RETURN(layer.query_norm_gamma, read(p + kQueryNorm + ".weight", {d}, false));
    ASSIGN_OR_RETURN(layer.key_norm_gamma, read(p + kKeyNorm + ".weight", {d}, false));
    layer.attention_out_bias.clear();
    RETURN_IF_ERROR(stacked(p, {spec.attention_out}, {h}, qn, biased, layer.attention_out_weight,
                            &layer.attention_out_bias));
    ASSIGN_OR_RETURN(layer.output_norm_gamma, read(p + spec.output_norm + ".weight", {h}, false));
    // [gate rows; up rows]: one GEMM gives both halves of the SwiGLU.
    RETURN_IF_ERROR(stacked(p, {spec.intermediate, kUp}, {inter, inter}, h, false,
                            layer.intermediate_weight, nullptr));
    RETURN_IF_ERROR(stacked(p, {spec.output}, {h}, inter, false, layer.output_weight, nullptr));
  }
  ASSIGN_OR_RETURN(net.final_norm_gamma, read(kFinalNorm, {h}, false));
  for (RopeTable& table : net.rope_tables) {
    FillRopeTable(table, net.max_sequence_length, net.head_size());
  }
  if (net.classifier == ClassifierKind::kQwen3Score) {
    ASSIGN_OR_RETURN(net.classifier_weight, read("score.weight", {net.num_labels, h}, true));
    net.classifier_bias.assign(static_cast<size_t>(net.num_labels), 0.0f);
  }
  return absl::OkStatus();
}

void Qwen3Logits(const EncoderNetwork& net, const PackedBatch& batch, const float* hidden,
                 float* out) {
  const int h = net.hidden;
  const int labels = net.num_labels;
  for (int s = 0; s < batch.sequences(); ++s) {
    const int64_t begin = batch.offsets[s];
    int64_t last = batch.offsets[s + 1] - 1;
    if (net.score_pad_token_id >= 0) {
      while (last > begin && batch.token_ids[last] == net.score_pad_token_id) --last;
    }
    const float* x = hidden + last * h;
    for (int c = 0; c < labels; ++c) {
      const float* w = net.classifier_weight.data() + int64_t{c} * h;
      float sum = 0.0f;
      for (int j = 0; j < h; ++j) sum += x[j] * w[j];
      out[int64_t{s} * labels + c] = sum;
    }
  }
}

void ForwardDecoder(const EncoderNetwork& net, const PackedBatch& batch, EncoderWorkspace& ws,
                    int64_t chunk_tokens, ComputePool* pool) {
  const int64_t tokens = batch.tokens();
  const int64_t budget = std::max<int64_t>(chunk_tokens, 1);
  ws.Reserve(net, batch, budget, pool == nullptr ? 1 : pool->threads(), kQueryBlock);
  const int h = net.hidden;
  const int inter = net.intermediate;
  const int64_t qkv_width = net.qkv_width();
  const float eps = net.layer_norm_eps;
  const kernels::KernelTable& k = kernels::Get();
  const gemm::GemmKernel& g = gemm::Get();

  for (int64_t t = 0; t < tokens; ++t) {
    net.word_embeddings.CopyRow(batch.token_ids[t], ws.hidden_.data() + t * h);
    ws.mask_add_[t] = batch.attend[t] ? 0.0f : -std::numeric_limits<float>::infinity();
  }

  for (int first = 0; first < batch.sequences();) {
    const int end = ChunkEnd(batch, first, budget);
    const int64_t t0 = batch.offsets[first];
    const int64_t rows = batch.offsets[end] - t0;
    float* x = ws.hidden_.data() + t0 * h;
    const float* mask_add = ws.mask_add_.data() + t0;
    const int32_t* positions = batch.positions.data() + t0;
    for (size_t l = 0; l < net.encoder_layers.size(); ++l) {
      const EncoderLayer& layer = net.encoder_layers[l];
      const LayerPlan& plan = net.layer_plans[l];
      ForRowBlocks(pool, rows, kMinRowsPerTask, [&](int64_t r0, int64_t count) {
        RmsNorm(x + r0 * h, h, count, h, layer.attention_norm_gamma.data(), eps,
                ws.projected_.data() + r0 * h, h);
      });
      float* qkv = ws.qkv_.data();
      PackedGemm(pool, g, ws.projected_.data(), rows, layer.qkv_weight,
                 layer.qkv_bias.empty() ? nullptr : layer.qkv_bias.data(), qkv);
      ForRowBlocks(pool, rows, kMinRowsPerTask, [&](int64_t r0, int64_t count) {
        NormAndRotate(net, layer, plan, positions + r0, count, qkv + r0 * qkv_width);
      });
      ForEachSequenceHead(
          pool, batch, first, end, net.heads, [&](int head, int64_t begin, int n, int worker) {
            EncoderWorkspace::AttentionScratch& scratch =
                ws.attention_[static_cast<size_t>(worker)];
            CausalHeadAttention(net, k, g, qkv, mask_add, begin, n, head, scratch.scores.data(),
                                scratch.key_panels, scratch.value_panels, ws.context_.data());
          });
      PackedGemm(pool, g, ws.context_.data(), rows, layer.attention_out_weight, nullptr,
                 ws.projected_.data());
      ForRowBlocks(pool, rows, kMinRowsPerTask, [&](int64_t r0, int64_t count) {
        AddResidual(ws.projected_.data() + r0 * h, layer.attention_out_bias, count, h, x + r0 * h);
        // The MLP's input: post_attention_layernorm(x), into context_ (free until the next
        // layer's attention).
        RmsNorm(x + r0 * h, h, count, h, layer.output_norm_gamma.data(), eps,
                ws.context_.data() + r0 * h, h);
      });
      PackedGemm(pool, g, ws.context_.data(), rows, layer.intermediate_weight, nullptr,
                 ws.gated_.data());
      // SwiGLU: silu(gate) * up, gate and up the two halves of each row.
      ForRowBlocks(pool, rows, kMinRowsPerTask, [&](int64_t r0, int64_t count) {
        for (int64_t r = r0; r < r0 + count; ++r) {
          const float* gate = ws.gated_.data() + r * 2 * inter;
          const float* up = gate + inter;
          float* out = ws.intermediate_.data() + r * inter;
          for (int j = 0; j < inter; ++j) {
            const float a = gate[j];
            out[j] = a / (1.0f + std::exp(-a)) * up[j];
          }
        }
      });
      PackedGemm(pool, g, ws.intermediate_.data(), rows, layer.output_weight, nullptr,
                 ws.projected_.data());
      ForRowBlocks(pool, rows, kMinRowsPerTask, [&](int64_t r0, int64_t count) {
        AddResidual(ws.projected_.data() + r0 * h, {}, count, h, x + r0 * h);
      });
    }
    ForRowBlocks(pool, rows, kMinRowsPerTask, [&](int64_t r0, int64_t count) {
      RmsNorm(x + r0 * h, h, count, h, net.final_norm_gamma.data(), eps, x + r0 * h, h);
    });
    first = end;
  }
}

}  // namespace sluice::engine::models::encoder
