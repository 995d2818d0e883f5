#include "engine/models/encoder/encoder_modernbert.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/models/encoder/encoder_arch.h"
#include "engine/models/encoder/encoder_config_json.h"
#include "engine/models/encoder/encoder_forward.h"
#include "engine/models/encoder/encoder_forward_steps.h"
#include "engine/models/encoder/encoder_gemm.h"
#include "engine/models/encoder/encoder_kernels.h"
#include "nlohmann/json.hpp"

namespace sluice::engine::models::encoder {
namespace {

// Queries per block of a sequence's attention: the scores of one block against its keys (all of
// the sequence's for a global layer, the block's window for a local one) are the scratch, so a
// sequence of 8,192 tokens needs 128 x 8,192 floats, not 8,192^2, and a local layer computes
// O(n x window) scores, not O(n^2).
constexpr int kQueryBlock = 128;

// ModernBertConfig's defaults (configuration_modernbert.py).
constexpr double kGlobalRopeTheta = 160000.0;
constexpr double kLocalRopeTheta = 10000.0;
constexpr int64_t kGlobalEveryN = 3;
constexpr int64_t kLocalAttention = 128;

absl::StatusOr<int64_t> Int(const Json& json, const std::string& path, const char* key,
                            int64_t fallback, int64_t min, int64_t max) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < min || it->get<int64_t>() > max) {
    return FieldError(path, key, absl::StrCat("must be an integer in [", min, ", ", max, "]"));
  }
  return it->get<int64_t>();
}

absl::StatusOr<std::string> String(const Json& json, const std::string& path, const char* key,
                                   const char* fallback) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return std::string(fallback);
  if (!it->is_string()) return FieldError(path, key, "is not a string");
  return it->get<std::string>();
}

// Rotates the query and key of every head of `rows` QKV rows (row stride 3H) by their positions:
// q'[i] = q[i] cos - q[i + d/2] sin, q'[i + d/2] = q[i + d/2] cos + q[i] sin (rotate_half).
void ApplyRotary(const EncoderNetwork& net, const RopeTable& table, const int32_t* positions,
                 int64_t rows, float* qkv) {
  const int h = net.hidden;
  const int d = net.head_size();
  const int half = d / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float* cos = table.cos.data() + int64_t{positions[r]} * half;
    const float* sin = table.sin.data() + int64_t{positions[r]} * half;
    float* row = qkv + r * 3 * h;
    for (int part = 0; part < 2; ++part) {  // query, then key
      for (int head = 0; head < net.heads; ++head) {
        RotateHalf(row + part * h + head * d, cos, sin, half);
      }
    }
  }
}

// Attention of one head of one sequence (tokens [begin, begin + n) of the chunk) under `window`
// (0: global), by blocks of kQueryBlock queries against the keys any of them may see. Writes its
// own columns of `context` only.
void HeadAttention(const EncoderNetwork& net, const kernels::KernelTable& k,
                   const gemm::GemmKernel& g, const float* qkv, const float* mask_add,
                   int64_t begin, int n, int head, int window, float* scores, float* key_panels,
                   float* value_panels, float* context) {
  const int h = net.hidden;
  const int d = net.head_size();
  const int64_t ld = 3 * int64_t{h};
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float* q = qkv + begin * ld + head * d;
  const float* key = q + h;
  const float* v = q + 2 * h;
  const float* mask = mask_add + begin;
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  for (int i0 = 0; i0 < n; i0 += kQueryBlock) {
    const int rows = std::min(kQueryBlock, n - i0);
    const int k0 = window > 0 ? std::max(0, i0 - window) : 0;
    const int k1 = window > 0 ? std::min(n, i0 + rows + window) : n;
    const int kn = k1 - k0;
    PackPanels(key + k0 * ld, ld, kn, d, key_panels);
    PanelGemm(g, q + i0 * ld, ld, rows, key_panels, kn, d, nullptr, scores, kn);
    // Rows whose window holds no attended key ("blind": an interior run of mask zeros wider than
    // the window): transformers' masks give every key of the sequence the same finfo.min, so the
    // weights are uniform over all n keys; their softmax rows are left out and their context is
    // that mean of the values.
    std::array<bool, kQueryBlock> blind{};
    bool any_blind = false;
    if (window > 0) {
      for (int r = 0; r < rows; ++r) {
        const int i = i0 + r;
        float* row = scores + int64_t{r} * kn;
        const int lo = std::max(0, i - window) - k0;
        const int hi = std::min(n, i + window + 1) - k0;
        std::fill(row, row + lo, kMinusInf);
        std::fill(row + hi, row + kn, kMinusInf);
        bool attended = false;
        for (int j = lo; j < hi && !attended; ++j) attended = mask[k0 + j] == 0.0f;
        blind[static_cast<size_t>(r)] = !attended;
        any_blind |= !attended;
      }
    }
    if (any_blind) {
      for (int r = 0; r < rows; ++r) {
        float* row = scores + int64_t{r} * kn;
        if (blind[static_cast<size_t>(r)]) {
          std::fill(row, row + kn, 0.0f);  // replaced below
        } else {
          k.masked_softmax(row, mask + k0, 1, kn, scale);
        }
      }
    } else {
      k.masked_softmax(scores, mask + k0, rows, kn, scale);
    }
    PackTransposedPanels(v + k0 * ld, ld, kn, d, value_panels);
    float* out = context + (begin + i0) * h + head * d;
    PanelGemm(g, scores, kn, rows, value_panels, d, kn, nullptr, out, h);
    for (int r = 0; any_blind && r < rows; ++r) {
      if (!blind[static_cast<size_t>(r)]) continue;
      float* row = out + int64_t{r} * h;
      std::fill(row, row + d, 0.0f);
      for (int j = 0; j < n; ++j) {
        for (int c = 0; c < d; ++c) row[c] += v[j * ld + c];
      }
      for (int c = 0; c < d; ++c) row[c] /= static_cast<float>(n);
    }
  }
}

// rows of `in` ([rows, H]) LayerNormed into `out`.
void NormInto(const kernels::KernelTable& k, const float* in, const std::vector<float>& gamma,
              const std::vector<float>& beta, int64_t rows, int h, float eps, float* out) {
  std::copy_n(in, rows * h, out);
  k.layer_norm(out, gamma.data(), beta.data(), rows, h, eps);
}

// x[r] += y[r] (+ bias).
void AddResidual(const float* y, const std::vector<float>& bias, int64_t rows, int h, float* x) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * h;
    float* xr = x + r * h;
    if (bias.empty()) {
      for (int j = 0; j < h; ++j) xr[j] += yr[j];
    } else {
      for (int j = 0; j < h; ++j) xr[j] += yr[j] + bias[static_cast<size_t>(j)];
    }
  }
}

}  // namespace

absl::Status ReadModernBertConfig(const Json& json, const std::string& path, EncoderNetwork& net) {
  ASSIGN_OR_RETURN(net.norm_biases, StrictBoolField(json, path, "norm_bias", false));
  ASSIGN_OR_RETURN(net.attention_biases, StrictBoolField(json, path, "attention_bias", false));
  ASSIGN_OR_RETURN(net.mlp_biases, StrictBoolField(json, path, "mlp_bias", false));
  ASSIGN_OR_RETURN(net.classifier_dense_bias_present,
                   StrictBoolField(json, path, "classifier_bias", false));
  ASSIGN_OR_RETURN(const double global_theta,
                   PositiveNumberField(json, path, "global_rope_theta", kGlobalRopeTheta));
  ASSIGN_OR_RETURN(const double local_theta,
                   PositiveNumberField(json, path, "local_rope_theta", kLocalRopeTheta));
  ASSIGN_OR_RETURN(const int64_t every,
                   Int(json, path, "global_attn_every_n_layers", kGlobalEveryN, 1, 1 << 20));
  ASSIGN_OR_RETURN(const int64_t local,
                   Int(json, path, "local_attention", kLocalAttention, 2, 1 << 30));
  ASSIGN_OR_RETURN(const std::string pooling, String(json, path, "classifier_pooling", "cls"));
  if (pooling != "cls" && pooling != "mean") {
    return FieldError(path, "classifier_pooling",
                      absl::StrCat("'", pooling, "' is not supported (cls or mean)"));
  }
  net.classifier_mean_pooling = pooling == "mean";
  ASSIGN_OR_RETURN(const std::string head_act, String(json, path, "classifier_activation", "gelu"));
  absl::StatusOr<HiddenActivation> activation = ParseHiddenActivation(head_act);
  if (!activation.ok()) {
    return FieldError(path, "classifier_activation", std::string(activation.status().message()));
  }
  net.classifier_activation = *activation;
  if (net.head_size() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "': head size ", net.head_size(),
                                                   " (hidden_size / num_attention_heads) is odd: "
                                                   "rotary embeddings rotate pairs"));
  }
  net.rope_tables.assign(2, RopeTable{});
  net.rope_tables[0].theta = global_theta;
  net.rope_tables[1].theta = local_theta;
  for (int l = 0; l < net.layers; ++l) {
    LayerPlan& plan = net.layer_plans[static_cast<size_t>(l)];
    plan.pre_norm = true;
    plan.attention_norm = l != 0;
    plan.gated_mlp = true;
    const bool global = l % every == 0;
    plan.rope_table = global ? 0 : 1;
    plan.window = global ? 0 : static_cast<int>(local / 2);
  }
  return absl::OkStatus();
}

absl::Status ReadWordEmbeddings(TensorReader read, const ArchSpec& spec, EncoderNetwork& net) {
  ASSIGN_OR_RETURN(std::vector<float> words,
                   read(spec.word_embeddings, {net.vocab_size, net.hidden}, false));
  net.word_embeddings =
      EmbeddingTable::Hold(std::move(words), net.vocab_size, net.hidden, net.hold_16bit_weights);
  return absl::OkStatus();
}

// transformers' default rope in FP32: inv_freq = 1 / theta^(2i / d) (torch.pow of float32), the
// angle p * inv_freq rounded to float32, then its cos and sin.
void FillRopeTable(RopeTable& table, int positions, int head_size) {
  const int half = head_size / 2;
  table.cos.resize(static_cast<size_t>(positions) * half);
  table.sin.resize(static_cast<size_t>(positions) * half);
  const float theta = static_cast<float>(table.theta);
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_size);
    const float power = static_cast<float>(std::pow(double{theta}, double{exponent}));
    inv_freq[static_cast<size_t>(i)] = 1.0f / power;
  }
  for (int p = 0; p < positions; ++p) {
    for (int i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[static_cast<size_t>(i)];
      const size_t at = static_cast<size_t>(p) * half + i;
      table.cos[at] = static_cast<float>(std::cos(double{angle}));
      table.sin[at] = static_cast<float>(std::sin(double{angle}));
    }
  }
}

int64_t ModernBertWeightBytes(const EncoderNetwork& net) {
  const int64_t h = net.hidden;
  const int64_t i = net.intermediate;
  int64_t floats = (int64_t{net.vocab_size} + 2) * h + 2 * h;  // embeddings + norm, final_norm
  floats += int64_t{net.layers} *
            (3 * h * h + 3 * h + h * h + h + 4 * h + 2 * i * h + 2 * i + h * i + h + 2 * i);
  floats += 2 * int64_t{net.max_sequence_length} * (net.head_size() / 2) * 2;  // rope tables
  if (net.classifier != ClassifierKind::kNone) {
    floats += h * h + 3 * h + int64_t{net.num_labels} * (h + 1);
  }
  return floats * static_cast<int64_t>(sizeof(float));
}

absl::Status ReadModernBertWeights(TensorReader read, const ArchSpec& spec, EncoderNetwork& net) {
  const int64_t h = net.hidden;
  const int64_t inter = net.intermediate;
  const std::vector<float> zeros(static_cast<size_t>(h), 0.0f);
  // A LayerNorm: its weight, and its bias where norm_bias (else zeros).
  const auto norm = [&](const std::string& name, std::vector<float>& gamma,
                        std::vector<float>& beta, bool head) -> absl::Status {
    ASSIGN_OR_RETURN(gamma, read(name + ".weight", {h}, head));
    if (net.norm_biases) {
      ASSIGN_OR_RETURN(beta, read(name + ".bias", {h}, head));
    } else {
      beta = zeros;
    }
    return absl::OkStatus();
  };
  // A linear layer: packed weight [n, k], and its bias where `biased` (else empty, or zeros
  // where `zero_bias`).
  const auto linear = [&](const std::string& name, int64_t n, int64_t k, bool biased,
                          PackedWeights& weight, std::vector<float>& bias,
                          bool zero_bias) -> absl::Status {
    {
      ASSIGN_OR_RETURN(std::vector<float> w, read(name + ".weight", {n, k}, false));
      weight = PackedWeights::Pack(w, static_cast<int>(n), static_cast<int>(k), PackFormat(net, w));
    }
    if (biased) {
      ASSIGN_OR_RETURN(bias, read(name + ".bias", {n}, false));
    } else if (zero_bias) {
      bias.assign(static_cast<size_t>(n), 0.0f);
    } else {
      bias.clear();
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(ReadWordEmbeddings(read, spec, net));
  RETURN_IF_ERROR(
      norm("embeddings.norm", net.embedding_norm_gamma, net.embedding_norm_beta, false));
  net.encoder_layers.resize(static_cast<size_t>(net.layers));
  for (int l = 0; l < net.layers; ++l) {
    EncoderLayer& layer = net.encoder_layers[static_cast<size_t>(l)];
    const LayerPlan& plan = net.layer_plans[static_cast<size_t>(l)];
    const std::string p = absl::StrCat(spec.layer_prefix, l, ".");
    if (plan.attention_norm) {
      RETURN_IF_ERROR(norm(p + spec.attention_norm, layer.attention_norm_gamma,
                           layer.attention_norm_beta, false));
    }
    RETURN_IF_ERROR(linear(p + spec.query, 3 * h, h, net.attention_biases, layer.qkv_weight,
                           layer.qkv_bias, false));
    RETURN_IF_ERROR(linear(p + spec.attention_out, h, h, net.attention_biases,
                           layer.attention_out_weight, layer.attention_out_bias, false));
    RETURN_IF_ERROR(
        norm(p + spec.output_norm, layer.output_norm_gamma, layer.output_norm_beta, false));
    // bias_activate reads a bias: zeros without mlp_bias.
    RETURN_IF_ERROR(linear(p + spec.intermediate, 2 * inter, h, net.mlp_biases,
                           layer.intermediate_weight, layer.intermediate_bias, true));
    RETURN_IF_ERROR(linear(p + spec.output, h, inter, net.mlp_biases, layer.output_weight,
                           layer.output_bias, false));
  }
  RETURN_IF_ERROR(norm("final_norm", net.final_norm_gamma, net.final_norm_beta, false));
  for (RopeTable& table : net.rope_tables) {
    FillRopeTable(table, net.max_sequence_length, net.head_size());
  }
  if (net.classifier == ClassifierKind::kModernbert) {
    const int64_t labels = net.num_labels;
    ASSIGN_OR_RETURN(net.classifier_dense_weight, read("head.dense.weight", {h, h}, true));
    if (net.classifier_dense_bias_present) {
      ASSIGN_OR_RETURN(net.classifier_dense_bias, read("head.dense.bias", {h}, true));
    }
    RETURN_IF_ERROR(norm("head.norm", net.classifier_norm_gamma, net.classifier_norm_beta, true));
    ASSIGN_OR_RETURN(net.classifier_weight, read("classifier.weight", {labels, h}, true));
    ASSIGN_OR_RETURN(net.classifier_bias, read("classifier.bias", {labels}, true));
  }
  return absl::OkStatus();
}

void ForwardPreNorm(const EncoderNetwork& net, const PackedBatch& batch, EncoderWorkspace& ws,
                    int64_t chunk_tokens, ComputePool* pool) {
  const int64_t tokens = batch.tokens();
  const int64_t budget = std::max<int64_t>(chunk_tokens, 1);
  ws.Reserve(net, batch, budget, pool == nullptr ? 1 : pool->threads(), kQueryBlock);
  const int h = net.hidden;
  const int inter = net.intermediate;
  const float eps = net.layer_norm_eps;
  const kernels::KernelTable& k = kernels::Get();
  const gemm::GemmKernel& g = gemm::Get();

  // Embeddings: LayerNorm(tok_embeddings[id]); positions enter through the rotary tables.
  ForRowBlocks(pool, tokens, kMinRowsPerTask, [&](int64_t t0, int64_t count) {
    for (int64_t t = t0; t < t0 + count; ++t) {
      net.word_embeddings.CopyRow(batch.token_ids[t], ws.hidden_.data() + t * h);
    }
    k.layer_norm(ws.hidden_.data() + t0 * h, net.embedding_norm_gamma.data(),
                 net.embedding_norm_beta.data(), count, h, eps);
  });
  for (int64_t t = 0; t < tokens; ++t) {
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
      // Attention on attn_norm(x) (layer 0: x itself).
      const float* attention_in = x;
      if (plan.attention_norm) {
        ForRowBlocks(pool, rows, kMinRowsPerTask, [&](int64_t r0, int64_t count) {
          NormInto(k, x + r0 * h, layer.attention_norm_gamma, layer.attention_norm_beta, count, h,
                   eps, ws.projected_.data() + r0 * h);
        });
        attention_in = ws.projected_.data();
      }
      float* qkv = ws.qkv_.data();
      PackedGemm(pool, g, attention_in, rows, layer.qkv_weight,
                 layer.qkv_bias.empty() ? nullptr : layer.qkv_bias.data(), qkv);
      if (plan.rope_table >= 0) {
        const RopeTable& table = net.rope_tables[static_cast<size_t>(plan.rope_table)];
        ForRowBlocks(pool, rows, kMinRowsPerTask, [&](int64_t r0, int64_t count) {
          ApplyRotary(net, table, positions + r0, count, qkv + r0 * 3 * h);
        });
      }
      ForEachSequenceHead(pool, batch, first, end, net.heads,
                          [&](int head, int64_t begin, int n, int worker) {
                            EncoderWorkspace::AttentionScratch& scratch =
                                ws.attention_[static_cast<size_t>(worker)];
                            HeadAttention(net, k, g, qkv, mask_add, begin, n, head, plan.window,
                                          scratch.scores.data(), scratch.key_panels,
                                          scratch.value_panels, ws.context_.data());
                          });
      PackedGemm(pool, g, ws.context_.data(), rows, layer.attention_out_weight, nullptr,
                 ws.projected_.data());
      ForRowBlocks(pool, rows, kMinRowsPerTask, [&](int64_t r0, int64_t count) {
        AddResidual(ws.projected_.data() + r0 * h, layer.attention_out_bias, count, h, x + r0 * h);
        // The MLP's input: mlp_norm(x), into context_ (free until the next layer's attention).
        NormInto(k, x + r0 * h, layer.output_norm_gamma, layer.output_norm_beta, count, h, eps,
                 ws.context_.data() + r0 * h);
      });
      PackedGemm(pool, g, ws.context_.data(), rows, layer.intermediate_weight, nullptr,
                 ws.gated_.data());
      // GeGLU: act(input + b) * (gate + b), input and gate the two halves of each Wi row.
      ForRowBlocks(pool, rows, kMinRowsPerTask, [&](int64_t r0, int64_t count) {
        for (int64_t r = r0; r < r0 + count; ++r) {
          float* input = ws.gated_.data() + r * 2 * inter;
          const float* gate = input + inter;
          k.bias_activate(input, layer.intermediate_bias.data(), 1, inter, net.activation);
          const float* gate_bias = layer.intermediate_bias.data() + inter;
          float* out = ws.intermediate_.data() + r * inter;
          for (int j = 0; j < inter; ++j) out[j] = input[j] * (gate[j] + gate_bias[j]);
        }
      });
      PackedGemm(pool, g, ws.intermediate_.data(), rows, layer.output_weight, nullptr,
                 ws.projected_.data());
      ForRowBlocks(pool, rows, kMinRowsPerTask, [&](int64_t r0, int64_t count) {
        AddResidual(ws.projected_.data() + r0 * h, layer.output_bias, count, h, x + r0 * h);
      });
    }
    ForRowBlocks(pool, rows, kMinRowsPerTask, [&](int64_t r0, int64_t count) {
      k.layer_norm(x + r0 * h, net.final_norm_gamma.data(), net.final_norm_beta.data(), count, h,
                   eps);
    });
    first = end;
  }
}

void ModernBertLogits(const EncoderNetwork& net, const PackedBatch& batch, const float* hidden,
                      float* pooled, float* scratch, float* out) {
  const int h = net.hidden;
  const int sequences = batch.sequences();
  const int labels = net.num_labels;
  for (int s = 0; s < sequences; ++s) {
    float* row = pooled + int64_t{s} * h;
    const int64_t begin = batch.offsets[s];
    if (!net.classifier_mean_pooling) {
      std::copy_n(hidden + begin * h, h, row);
      continue;
    }
    // (last_hidden_state * mask).sum / mask.sum over the attended tokens.
    std::vector<double> sum(static_cast<size_t>(h), 0.0);
    double count = 0;
    for (int64_t t = begin; t < batch.offsets[s + 1]; ++t) {
      if (!batch.attend[t]) continue;
      for (int j = 0; j < h; ++j) sum[static_cast<size_t>(j)] += hidden[t * h + j];
      count += 1;
    }
    for (int j = 0; j < h; ++j) row[j] = static_cast<float>(sum[static_cast<size_t>(j)] / count);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sequences, h, h, 1.0f, pooled, h,
              net.classifier_dense_weight.data(), h, 0.0f, scratch, h);
  const kernels::KernelTable& k = kernels::Get();
  const std::vector<float> zeros(static_cast<size_t>(h), 0.0f);
  const std::vector<float>& dense_bias =
      net.classifier_dense_bias.empty() ? zeros : net.classifier_dense_bias;
  k.bias_activate(scratch, dense_bias.data(), sequences, h, net.classifier_activation);
  k.layer_norm(scratch, net.classifier_norm_gamma.data(), net.classifier_norm_beta.data(),
               sequences, h, net.layer_norm_eps);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sequences, labels, h, 1.0f, scratch, h,
              net.classifier_weight.data(), h, 0.0f, out, labels);
  for (int64_t i = 0; i < int64_t{sequences} * labels; ++i) {
    out[i] += net.classifier_bias[static_cast<size_t>(i % labels)];
  }
}

}  // namespace sluice::engine::models::encoder
