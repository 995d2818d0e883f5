#include "engine/models/encoder/encoder_forward.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "engine/models/encoder/encoder_forward_steps.h"
#include "engine/models/encoder/encoder_gemm.h"
#include "engine/models/encoder/encoder_kernels.h"
#include "engine/models/encoder/encoder_modernbert.h"
#include "engine/models/encoder/encoder_qwen3.h"

namespace sluice::engine::models::encoder {
namespace {

// y[rows, out] = x[rows, in] x w[out, in]^T (nn.Linear's layout, read transposed by the GEMM):
// the heads' small layers (pooler, classifier), which stay row-major on OpenBLAS; the encoder
// layers' four GEMMs run on PackedGemm.
void Linear(const float* x, int64_t rows, int in, const std::vector<float>& w, int out, float* y) {
  if (rows == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), out, in, 1.0f, x, in,
              w.data(), in, 0.0f, y, out);
}

// Attention of one head of one sequence (tokens [begin, begin + n)): context = softmax(Q K^T /
// sqrt(d) + mask) V, written into context[begin.., head * d..]. Both products run on the
// encoder's own GEMM: the head's keys are packed into panels (K is the score product's right-hand
// side, [n, d] like an nn.Linear weight) and its values likewise as V^T, a copy of n x 16-float
// runs per panel; Q and the probabilities are read in place (Q from the QKV rows, leading dimension
// 3H). Packing costs n d per operand against the products' n^2 d. OpenBLAS, which packed both
// operands of every one of these small products and ran them at about half the large GEMM's rate,
// was ~8 % of a MiniLM forward pass. The scale rides on the softmax. A (sequence, head) pair is
// the unit the compute pool splits attention into: it writes its own columns of `context` only.
void HeadAttention(const EncoderNetwork& net, const kernels::KernelTable& k,
                   const gemm::GemmKernel& g, const float* qkv, const float* mask_add,
                   int64_t begin, int n, int head, float* scores, float* key_panels,
                   float* value_panels, float* context) {
  const int h = net.hidden;
  const int d = net.head_size();
  const int ld = 3 * h;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float* q = qkv + begin * ld + head * d;
  const float* key = q + h;
  const float* v = q + 2 * h;
  PackPanels(key, ld, n, d, key_panels);
  PanelGemm(g, q, ld, n, key_panels, n, d, nullptr, scores, n);
  float softmax_scale = scale;
  if (!net.relative_position_bias.empty()) {
    // MPNet: scores / sqrt(d) + the head's bias of key - query (row i reads the table from
    // key - query = -i on; |key - query| < n <= max_sequence_length, which request validation
    // holds), then the softmax unscaled.
    const int m = net.max_sequence_length;
    const float* bias = net.relative_position_bias.data() + int64_t{head} * (2 * m - 1) + (m - 1);
    for (int i = 0; i < n; ++i) {
      float* row = scores + int64_t{i} * n;
      const float* row_bias = bias - i;
      for (int j = 0; j < n; ++j) row[j] = row[j] * scale + row_bias[j];
    }
    softmax_scale = 1.0f;
  }
  k.masked_softmax(scores, mask_add + begin, n, n, softmax_scale);
  PackTransposedPanels(v, ld, n, d, value_panels);
  PanelGemm(g, scores, n, n, value_panels, d, n, nullptr, context + begin * h + head * d, h);
}

void GatherFirstTokens(const EncoderNetwork& net, const PackedBatch& batch, const float* hidden,
                       float* out) {
  const int h = net.hidden;
  for (int s = 0; s < batch.sequences(); ++s) {
    std::copy_n(hidden + batch.offsets[s] * h, h, out + static_cast<int64_t>(s) * h);
  }
}

}  // namespace

void PackedBatch::Clear() {
  token_ids.clear();
  token_types.clear();
  positions.clear();
  attend.clear();
  offsets.assign(1, 0);
}

void EncoderWorkspace::Reserve(const EncoderNetwork& net, const PackedBatch& batch, int64_t budget,
                               int workers, int64_t query_block) {
  int64_t longest = 0;
  int64_t chunk_tokens = 0;  // the most tokens of one chunk: the layers' scratch is sized for it
  ChunkSizes(batch, budget, &longest, &chunk_tokens);
  const int64_t tokens = batch.tokens();
  const int sequences = batch.sequences();
  const int64_t query_rows = query_block < 0 ? longest : std::min(longest, query_block);
  auto grow = [](std::vector<float>& v, int64_t size) {
    if (static_cast<int64_t>(v.size()) < size) v.resize(static_cast<size_t>(size));
  };
  const int64_t h = net.hidden;
  grow(hidden_, tokens * h);
  grow(qkv_, chunk_tokens * std::max<int64_t>(3 * h, net.qkv_width()));
  grow(context_, chunk_tokens * std::max<int64_t>(h, net.context_width()));
  grow(projected_, chunk_tokens * h);
  grow(intermediate_, chunk_tokens * net.intermediate);
  const bool gated = std::any_of(net.layer_plans.begin(), net.layer_plans.end(),
                                 [](const LayerPlan& plan) { return plan.gated_mlp; });
  if (gated) grow(gated_, chunk_tokens * 2 * net.intermediate);
  const int64_t key_floats = PanelFloats(static_cast<int>(longest), net.head_size());
  const int64_t value_floats = PanelFloats(net.head_size(), static_cast<int>(longest));
  constexpr int64_t kAlign = 16;  // floats: 64 bytes, one cache line, so a panel row is one line
  const auto aligned = [](float* p) {
    const auto address = reinterpret_cast<uintptr_t>(p);
    return reinterpret_cast<float*>((address + 63) & ~uintptr_t{63});
  };
  if (static_cast<int>(attention_.size()) < workers)
    attention_.resize(static_cast<size_t>(workers));
  for (AttentionScratch& scratch : attention_) {
    grow(scratch.scores, query_rows * longest);
    grow(scratch.panels, key_floats + value_floats + 2 * kAlign);
    scratch.key_panels = aligned(scratch.panels.data());
    scratch.value_panels = aligned(scratch.key_panels + key_floats);
  }
  grow(mask_add_, tokens);
  grow(first_tokens_, int64_t{sequences} * h);
  grow(head_, int64_t{sequences} * h);
}

// Token rows per pass through the layers (kForwardChunkTokens). A chunk's activations stay in the
// core's caches (MiniLM at 512 tokens: intermediate 3 MiB, QKV 2.3 MiB), where a whole large batch
// streams them through memory between every GEMM and its element-wise kernel (4096 tokens of
// MiniLM: a 24 MiB intermediate); the price is that each chunk reads the layer weights again,
// which 512 tokens amortize (256 did not for the BERT-base shape, whose layers hold 7 MiB each).
// Measured in docs/performance-history.md ("The Intel VM, and the chunked forward pass").
int64_t ForwardChunkTokens() {
  static const int64_t chunk = [] {
    const char* value = std::getenv("SLUICE_ENCODER_CHUNK_TOKENS");
    if (value == nullptr) return kForwardChunkTokens;
    const long long parsed = std::atoll(value);
    return parsed > 0 ? static_cast<int64_t>(parsed) : std::numeric_limits<int64_t>::max();
  }();
  return chunk;
}

int ChunkEnd(const PackedBatch& batch, int first, int64_t budget) {
  int end = first + 1;
  while (end < batch.sequences() && batch.offsets[end + 1] - batch.offsets[first] <= budget) {
    ++end;
  }
  return end;
}

void ChunkSizes(const PackedBatch& batch, int64_t budget, int64_t* longest, int64_t* widest) {
  *longest = 0;
  *widest = 0;
  for (int s = 0; s < batch.sequences(); ++s) {
    *longest = std::max(*longest, batch.offsets[s + 1] - batch.offsets[s]);
  }
  for (int s = 0; s < batch.sequences();) {
    const int end = ChunkEnd(batch, s, budget);
    *widest = std::max(*widest, batch.offsets[end] - batch.offsets[s]);
    s = end;
  }
}

void Forward(const EncoderNetwork& net, const PackedBatch& batch, EncoderWorkspace& ws,
             int64_t chunk_tokens, ComputePool* pool) {
  if (!net.layer_plans.empty() && net.layer_plans.front().causal) {
    ForwardDecoder(net, batch, ws, chunk_tokens, pool);
    return;
  }
  if (!net.layer_plans.empty() && net.layer_plans.front().pre_norm) {
    ForwardPreNorm(net, batch, ws, chunk_tokens, pool);
    return;
  }
  const int64_t tokens = batch.tokens();
  const int64_t budget = std::max<int64_t>(chunk_tokens, 1);
  ws.Reserve(net, batch, budget, pool == nullptr ? 1 : pool->threads());
  const int h = net.hidden;
  const kernels::KernelTable& k = kernels::Get();
  const gemm::GemmKernel& g = gemm::Get();

  // Embeddings: word + token type + position (HF's order of addition), then LayerNorm.
  ForRowBlocks(pool, tokens, kMinRowsPerTask, [&](int64_t t0, int64_t count) {
    for (int64_t t = t0; t < t0 + count; ++t) {
      const float* position = net.position_embeddings.data() + int64_t{batch.positions[t]} * h;
      float* xt = ws.hidden_.data() + t * h;
      net.word_embeddings.CopyRow(batch.token_ids[t], xt);  // the word's row, then added to
      if (!net.type_embeddings.empty()) {
        const float* type = net.type_embeddings.data() + int64_t{batch.token_types[t]} * h;
        for (int j = 0; j < h; ++j) xt[j] = xt[j] + type[j] + position[j];
      } else {
        for (int j = 0; j < h; ++j) xt[j] = xt[j] + position[j];
      }
    }
    k.layer_norm(ws.hidden_.data() + t0 * h, net.embedding_norm_gamma.data(),
                 net.embedding_norm_beta.data(), count, h, net.layer_norm_eps);
  });
  // The attention's additive key mask: 0 for an attended token, -inf for a masked one.
  for (int64_t t = 0; t < tokens; ++t) {
    ws.mask_add_[t] = batch.attend[t] ? 0.0f : -std::numeric_limits<float>::infinity();
  }

  // Every layer over one chunk of whole sequences, then the next chunk: a sequence's rows meet
  // only their own sequence's (attention) and every GEMM row is computed alone, so the answers
  // are the same bits as one pass over the whole batch.
  for (int first = 0; first < batch.sequences();) {
    const int end = ChunkEnd(batch, first, budget);
    const int64_t t0 = batch.offsets[first];
    const int64_t rows = batch.offsets[end] - t0;
    float* x = ws.hidden_.data() + t0 * h;
    const float* mask_add = ws.mask_add_.data() + t0;
    for (const EncoderLayer& layer : net.encoder_layers) {
      // One GEMM for query, key and value, the bias its accumulators' starting value.
      float* qkv = ws.qkv_.data();
      PackedGemm(pool, g, x, rows, layer.qkv_weight, layer.qkv_bias.data(), qkv);
      ForEachSequenceHead(
          pool, batch, first, end, net.heads, [&](int head, int64_t begin, int n, int worker) {
            EncoderWorkspace::AttentionScratch& scratch =
                ws.attention_[static_cast<size_t>(worker)];
            HeadAttention(net, k, g, qkv, mask_add, begin, n, head, scratch.scores.data(),
                          scratch.key_panels, scratch.value_panels, ws.context_.data());
          });
      PackedGemm(pool, g, ws.context_.data(), rows, layer.attention_out_weight, nullptr,
                 ws.projected_.data());
      ForRowBlocks(pool, rows, kMinRowsPerTask, [&](int64_t r0, int64_t count) {
        k.bias_residual_layer_norm(ws.projected_.data() + r0 * h, layer.attention_out_bias.data(),
                                   layer.attention_norm_gamma.data(),
                                   layer.attention_norm_beta.data(), count, h, net.layer_norm_eps,
                                   x + r0 * h);
      });
      PackedGemm(pool, g, x, rows, layer.intermediate_weight, nullptr, ws.intermediate_.data());
      ForRowBlocks(pool, rows, kMinRowsPerTask, [&](int64_t r0, int64_t count) {
        k.bias_activate(ws.intermediate_.data() + r0 * net.intermediate,
                        layer.intermediate_bias.data(), count, net.intermediate, net.activation);
      });
      PackedGemm(pool, g, ws.intermediate_.data(), rows, layer.output_weight, nullptr,
                 ws.projected_.data());
      ForRowBlocks(pool, rows, kMinRowsPerTask, [&](int64_t r0, int64_t count) {
        k.bias_residual_layer_norm(ws.projected_.data() + r0 * h, layer.output_bias.data(),
                                   layer.output_norm_gamma.data(), layer.output_norm_beta.data(),
                                   count, h, net.layer_norm_eps, x + r0 * h);
      });
    }
    first = end;
  }
}

namespace {

// A Dense module on one vector: out = activation(W in + b), in double as torch's float32 dot
// products are close to (the reference tolerance is 1e-4 relative).
void ApplyDense(const DenseLayer& layer, const float* in, float* out) {
  for (int o = 0; o < layer.out_features; ++o) {
    const float* row = layer.weight.data() + int64_t{o} * layer.in_features;
    double sum = layer.bias.empty() ? 0.0 : layer.bias[o];
    for (int i = 0; i < layer.in_features; ++i) sum += double{row[i]} * in[i];
    switch (layer.activation) {
      case DenseActivation::kIdentity:
        break;
      case DenseActivation::kTanh:
        sum = std::tanh(sum);
        break;
      case DenseActivation::kRelu:
        sum = std::max(sum, 0.0);
        break;
      case DenseActivation::kSigmoid:
        sum = 1.0 / (1.0 + std::exp(-sum));
        break;
      case DenseActivation::kGelu:
        sum = 0.5 * sum * (1.0 + std::erf(sum / std::sqrt(2.0)));
        break;
    }
    out[o] = static_cast<float>(sum);
  }
}

// The pooling modes of sequence `s` concatenated into `out` [net.pooled_size()], in
// sentence-transformers' order.
void Pool(const EncoderNetwork& net, const PackedBatch& batch, const float* hidden, int s,
          float* out) {
  const int h = net.hidden;
  const int64_t begin = batch.offsets[s];
  const int64_t end = batch.offsets[s + 1];
  float* next = out;
  if (net.pooling.cls) {
    std::copy_n(hidden + begin * h, h, next);
    next += h;
  }
  if (net.pooling.max) {
    // sentence-transformers sets masked tokens to -1e9 before the max.
    std::fill_n(next, h, -1e9f);
    for (int64_t t = begin; t < end; ++t) {
      if (!batch.attend[t]) continue;
      const float* row = hidden + t * h;
      for (int j = 0; j < h; ++j) next[j] = std::max(next[j], row[j]);
    }
    next += h;
  }
  if (net.pooling.mean || net.pooling.mean_sqrt_len) {
    std::vector<double> sum(h, 0.0);
    double count = 0;
    for (int64_t t = begin; t < end; ++t) {
      if (!batch.attend[t]) continue;
      const float* row = hidden + t * h;
      for (int j = 0; j < h; ++j) sum[j] += row[j];
      count += 1;
    }
    count = std::max(count, 1e-9);  // sentence-transformers clamps the mask sum likewise
    if (net.pooling.mean) {
      for (int j = 0; j < h; ++j) next[j] = static_cast<float>(sum[j] / count);
      next += h;
    }
    if (net.pooling.mean_sqrt_len) {
      const double root = std::sqrt(count);
      for (int j = 0; j < h; ++j) next[j] = static_cast<float>(sum[j] / root);
      next += h;
    }
  }
  if (net.pooling.weightedmean) {
    // Token t of the request's row (padding included, as the packed sequence keeps every token up
    // to the last attended one) weighs t + 1.
    std::vector<double> sum(h, 0.0);
    double weights = 0;
    for (int64_t t = begin; t < end; ++t) {
      if (!batch.attend[t]) continue;
      const double weight = static_cast<double>(t - begin + 1);
      const float* row = hidden + t * h;
      for (int j = 0; j < h; ++j) sum[j] += weight * row[j];
      weights += weight;
    }
    weights = std::max(weights, 1e-9);
    for (int j = 0; j < h; ++j) next[j] = static_cast<float>(sum[j] / weights);
    next += h;
  }
  if (net.pooling.lasttoken) {
    // The last attended token; zeros when none is (sentence-transformers gathers a masked row).
    int64_t last = -1;
    for (int64_t t = end - 1; t >= begin && last < 0; --t) {
      if (batch.attend[t]) last = t;
    }
    if (last >= 0) {
      std::copy_n(hidden + last * h, h, next);
    } else {
      std::fill_n(next, h, 0.0f);
    }
    next += h;
  }
}

}  // namespace

void PoolEmbedding(const EncoderNetwork& net, const PackedBatch& batch, const float* hidden, int s,
                   float* out) {
  // With Matryoshka truncation the full embedding goes to scratch and its first values to `out`.
  std::vector<float> full;
  float* target = out;
  if (net.truncate_dim > 0) {
    full.resize(static_cast<size_t>(net.full_embedding_size()));
    target = full.data();
  }
  if (net.dense.empty()) {
    Pool(net, batch, hidden, s, target);
  } else {
    // Pooled, then each Dense module in turn, the last one writing `target`.
    std::vector<float> in(static_cast<size_t>(net.pooled_size()));
    Pool(net, batch, hidden, s, in.data());
    std::vector<float> mapped;
    for (size_t d = 0; d < net.dense.size(); ++d) {
      const DenseLayer& layer = net.dense[d];
      const bool last = d + 1 == net.dense.size();
      if (!last) mapped.resize(static_cast<size_t>(layer.out_features));
      ApplyDense(layer, in.data(), last ? target : mapped.data());
      if (!last) in.swap(mapped);
    }
  }
  if (net.truncate_dim > 0) std::copy_n(full.data(), net.truncate_dim, out);
  if (net.normalize) {
    const int size = net.embedding_size();
    double squares = 0;
    for (int j = 0; j < size; ++j) squares += double{out[j]} * out[j];
    // torch.nn.functional.normalize: x / max(||x||, 1e-12).
    const double scale = 1.0 / std::max(std::sqrt(squares), 1e-12);
    for (int j = 0; j < size; ++j) out[j] = static_cast<float>(out[j] * scale);
  }
}

void PoolerOutput(const EncoderNetwork& net, const PackedBatch& batch, EncoderWorkspace& ws,
                  float* out) {
  const int h = net.hidden;
  const int sequences = batch.sequences();
  GatherFirstTokens(net, batch, ws.hidden_.data(), ws.first_tokens_.data());
  Linear(ws.first_tokens_.data(), sequences, h, net.pooler_weight, h, out);
  for (int64_t i = 0; i < int64_t{sequences} * h; ++i) {
    out[i] = std::tanh(out[i] + net.pooler_bias[i % h]);
  }
}

void Logits(const EncoderNetwork& net, const PackedBatch& batch, EncoderWorkspace& ws, float* out) {
  const int h = net.hidden;
  const int sequences = batch.sequences();
  const int labels = net.num_labels;
  if (net.classifier == ClassifierKind::kQwen3Score) {
    Qwen3Logits(net, batch, ws.hidden_.data(), out);
    return;
  }
  if (net.classifier == ClassifierKind::kModernbert) {
    ModernBertLogits(net, batch, ws.hidden_.data(), ws.first_tokens_.data(), ws.head_.data(), out);
    return;
  }
  if (net.classifier == ClassifierKind::kBert) {
    // BertForSequenceClassification: a Linear on pooler_output (dropout is off in eval).
    PoolerOutput(net, batch, ws, ws.head_.data());
  } else {
    // RobertaClassificationHead: dense + tanh on the first token, then out_proj; DistilBERT's:
    // pre_classifier + ReLU on the first token, then classifier.
    GatherFirstTokens(net, batch, ws.hidden_.data(), ws.first_tokens_.data());
    Linear(ws.first_tokens_.data(), sequences, h, net.classifier_dense_weight, h, ws.head_.data());
    const bool relu = net.classifier == ClassifierKind::kDistilbert;
    for (int64_t i = 0; i < int64_t{sequences} * h; ++i) {
      const float x = ws.head_[i] + net.classifier_dense_bias[i % h];
      ws.head_[i] = relu ? std::max(x, 0.0f) : std::tanh(x);
    }
  }
  Linear(ws.head_.data(), sequences, h, net.classifier_weight, labels, out);
  for (int64_t i = 0; i < int64_t{sequences} * labels; ++i)
    out[i] += net.classifier_bias[i % labels];
}

}  // namespace sluice::engine::models::encoder
