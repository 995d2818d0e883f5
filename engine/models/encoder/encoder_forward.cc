#include "engine/models/encoder/encoder_forward.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "engine/models/encoder/encoder_gemm.h"
#include "engine/models/encoder/encoder_kernels.h"

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

// Attention of one sequence (tokens [begin, begin + n)) for every head: context = softmax(Q K^T
// / sqrt(d) + mask) V, written into context[begin.., head * d..]. Both products run on the
// encoder's own GEMM: the head's keys are packed into panels (K is the score product's right-hand
// side, [n, d] like an nn.Linear weight) and its values likewise as V^T, a copy of n x 16-float
// runs per panel; Q and the probabilities are read in place (Q from the QKV rows, leading dimension
// 3H). Packing costs n d per operand against the products' n^2 d. OpenBLAS, which packed both
// operands of every one of these small products and ran them at about half the large GEMM's rate,
// was ~8 % of a MiniLM forward pass. The scale rides on the softmax.
void SequenceAttention(const EncoderNetwork& net, const kernels::KernelTable& k,
                       const gemm::GemmKernel& g, const float* qkv, const float* mask_add,
                       int64_t begin, int n, float* scores, float* key_panels, float* value_panels,
                       float* context) {
  const int h = net.hidden;
  const int d = net.head_size();
  const int ld = 3 * h;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int head = 0; head < net.heads; ++head) {
    const float* q = qkv + begin * ld + head * d;
    const float* key = q + h;
    const float* v = q + 2 * h;
    PackPanels(key, ld, n, d, key_panels);
    PanelGemm(g, q, ld, n, key_panels, n, d, nullptr, scores, n);
    k.masked_softmax(scores, mask_add + begin, n, n, scale);
    PackTransposedPanels(v, ld, n, d, value_panels);
    PanelGemm(g, scores, n, n, value_panels, d, n, nullptr, context + begin * h + head * d, h);
  }
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

void EncoderWorkspace::Reserve(const EncoderNetwork& net, int64_t tokens, int64_t chunk_tokens,
                               int sequences, int64_t longest) {
  auto grow = [](std::vector<float>& v, int64_t size) {
    if (static_cast<int64_t>(v.size()) < size) v.resize(static_cast<size_t>(size));
  };
  const int64_t h = net.hidden;
  grow(hidden_, tokens * h);
  grow(qkv_, chunk_tokens * 3 * h);
  grow(context_, chunk_tokens * h);
  grow(projected_, chunk_tokens * h);
  grow(intermediate_, chunk_tokens * net.intermediate);
  grow(scores_, longest * longest);
  const int64_t key_floats = PanelFloats(static_cast<int>(longest), net.head_size());
  const int64_t value_floats = PanelFloats(net.head_size(), static_cast<int>(longest));
  constexpr int64_t kAlign = 16;  // floats: 64 bytes, one cache line, so a panel row is one line
  grow(panels_, key_floats + value_floats + 2 * kAlign);
  const auto aligned = [](float* p) {
    const auto address = reinterpret_cast<uintptr_t>(p);
    return reinterpret_cast<float*>((address + 63) & ~uintptr_t{63});
  };
  key_panels_ = aligned(panels_.data());
  value_panels_ = aligned(key_panels_ + key_floats);
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

namespace {

// The sequences [first, end) of the next chunk: whole sequences while they fit in `budget`
// tokens, and always at least one (a longer sequence is a chunk of its own).
int ChunkEnd(const PackedBatch& batch, int first, int64_t budget) {
  int end = first + 1;
  while (end < batch.sequences() && batch.offsets[end + 1] - batch.offsets[first] <= budget) {
    ++end;
  }
  return end;
}

}  // namespace

void Forward(const EncoderNetwork& net, const PackedBatch& batch, EncoderWorkspace& ws,
             int64_t chunk_tokens) {
  const int64_t tokens = batch.tokens();
  const int64_t budget = std::max<int64_t>(chunk_tokens, 1);
  int64_t longest = 0;
  int64_t widest = 0;  // the most tokens of one chunk: the layers' scratch is sized for it
  for (int s = 0; s < batch.sequences(); ++s) {
    longest = std::max(longest, batch.offsets[s + 1] - batch.offsets[s]);
  }
  for (int s = 0; s < batch.sequences();) {
    const int end = ChunkEnd(batch, s, budget);
    widest = std::max(widest, batch.offsets[end] - batch.offsets[s]);
    s = end;
  }
  ws.Reserve(net, tokens, widest, batch.sequences(), longest);
  const int h = net.hidden;

  // Embeddings: word + token type + position (HF's order of addition), then LayerNorm.
  for (int64_t t = 0; t < tokens; ++t) {
    const float* word = net.word_embeddings.data() + int64_t{batch.token_ids[t]} * h;
    const float* position = net.position_embeddings.data() + int64_t{batch.positions[t]} * h;
    float* xt = ws.hidden_.data() + t * h;
    if (!net.type_embeddings.empty()) {
      const float* type = net.type_embeddings.data() + int64_t{batch.token_types[t]} * h;
      for (int j = 0; j < h; ++j) xt[j] = word[j] + type[j] + position[j];
    } else {
      for (int j = 0; j < h; ++j) xt[j] = word[j] + position[j];
    }
  }
  const kernels::KernelTable& k = kernels::Get();
  const gemm::GemmKernel& g = gemm::Get();
  k.layer_norm(ws.hidden_.data(), net.embedding_norm_gamma.data(), net.embedding_norm_beta.data(),
               tokens, h, net.layer_norm_eps);
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
      PackedGemm(x, rows, layer.qkv_weight, layer.qkv_bias.data(), qkv);
      for (int s = first; s < end; ++s) {
        const int64_t begin = batch.offsets[s] - t0;
        const int n = static_cast<int>(batch.offsets[s + 1] - batch.offsets[s]);
        SequenceAttention(net, k, g, qkv, mask_add, begin, n, ws.scores_.data(), ws.key_panels_,
                          ws.value_panels_, ws.context_.data());
      }
      PackedGemm(ws.context_.data(), rows, layer.attention_out_weight, nullptr,
                 ws.projected_.data());
      k.bias_residual_layer_norm(ws.projected_.data(), layer.attention_out_bias.data(),
                                 layer.attention_norm_gamma.data(),
                                 layer.attention_norm_beta.data(), rows, h, net.layer_norm_eps, x);
      PackedGemm(x, rows, layer.intermediate_weight, nullptr, ws.intermediate_.data());
      k.bias_activate(ws.intermediate_.data(), layer.intermediate_bias.data(), rows,
                      net.intermediate, net.activation);
      PackedGemm(ws.intermediate_.data(), rows, layer.output_weight, nullptr, ws.projected_.data());
      k.bias_residual_layer_norm(ws.projected_.data(), layer.output_bias.data(),
                                 layer.output_norm_gamma.data(), layer.output_norm_beta.data(),
                                 rows, h, net.layer_norm_eps, x);
    }
    first = end;
  }
}

void PoolEmbedding(const EncoderNetwork& net, const PackedBatch& batch, const float* hidden, int s,
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
  if (net.classifier == ClassifierKind::kBert) {
    // BertForSequenceClassification: a Linear on pooler_output (dropout is off in eval).
    PoolerOutput(net, batch, ws, ws.head_.data());
  } else {
    // RobertaClassificationHead: dense + tanh on the first token, then out_proj.
    GatherFirstTokens(net, batch, ws.hidden_.data(), ws.first_tokens_.data());
    Linear(ws.first_tokens_.data(), sequences, h, net.classifier_dense_weight, h, ws.head_.data());
    for (int64_t i = 0; i < int64_t{sequences} * h; ++i) {
      ws.head_[i] = std::tanh(ws.head_[i] + net.classifier_dense_bias[i % h]);
    }
  }
  Linear(ws.head_.data(), sequences, h, net.classifier_weight, labels, out);
  for (int64_t i = 0; i < int64_t{sequences} * labels; ++i)
    out[i] += net.classifier_bias[i % labels];
}

}  // namespace sluice::engine::models::encoder
