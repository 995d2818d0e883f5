#include "engine/models/encoder/encoder_forward.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace sluice::engine::models::encoder {
namespace {

// y[rows, out] = x[rows, in] x w[out, in]^T (nn.Linear's layout, read transposed by the GEMM).
void Linear(const float* x, int64_t rows, int in, const std::vector<float>& w, int out, float* y) {
  if (rows == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), out, in, 1.0f, x, in,
              w.data(), in, 0.0f, y, out);
}

// x[row] = LayerNorm(y[row] + bias + x[row]) for every row, in one pass over each row: the
// residual add, the projection's bias and the normalisation (biased variance, as torch).
void BiasResidualLayerNorm(const float* y, const std::vector<float>& bias,
                           const std::vector<float>& gamma, const std::vector<float>& beta,
                           int64_t rows, int width, float eps, float* x) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * width;
    float* xr = x + r * width;
    float sum = 0.0f;
    for (int j = 0; j < width; ++j) {
      xr[j] += yr[j] + bias[j];
      sum += xr[j];
    }
    const float mean = sum / static_cast<float>(width);
    float squares = 0.0f;
    for (int j = 0; j < width; ++j) {
      const float d = xr[j] - mean;
      squares += d * d;
    }
    const float inv = 1.0f / std::sqrt(squares / static_cast<float>(width) + eps);
    for (int j = 0; j < width; ++j) xr[j] = (xr[j] - mean) * inv * gamma[j] + beta[j];
  }
}

void LayerNormRows(float* x, const std::vector<float>& gamma, const std::vector<float>& beta,
                   int64_t rows, int width, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * width;
    float sum = 0.0f;
    for (int j = 0; j < width; ++j) sum += xr[j];
    const float mean = sum / static_cast<float>(width);
    float squares = 0.0f;
    for (int j = 0; j < width; ++j) {
      const float d = xr[j] - mean;
      squares += d * d;
    }
    const float inv = 1.0f / std::sqrt(squares / static_cast<float>(width) + eps);
    for (int j = 0; j < width; ++j) xr[j] = (xr[j] - mean) * inv * gamma[j] + beta[j];
  }
}

// values[row] = act(values[row] + bias), one pass.
void BiasActivate(float* values, const std::vector<float>& bias, int64_t rows, int width,
                  HiddenActivation activation) {
  constexpr float kSqrtHalf = 0.70710678118654752440f;
  constexpr float kSqrtTwoOverPi = 0.79788456080286535588f;
  for (int64_t r = 0; r < rows; ++r) {
    float* v = values + r * width;
    switch (activation) {
      case HiddenActivation::kGeluErf:
        for (int j = 0; j < width; ++j) {
          const float x = v[j] + bias[j];
          v[j] = 0.5f * x * (1.0f + std::erf(x * kSqrtHalf));
        }
        break;
      case HiddenActivation::kGeluTanh:
        for (int j = 0; j < width; ++j) {
          const float x = v[j] + bias[j];
          v[j] = 0.5f * x * (1.0f + std::tanh(kSqrtTwoOverPi * (x + 0.044715f * x * x * x)));
        }
        break;
      case HiddenActivation::kRelu:
        for (int j = 0; j < width; ++j) v[j] = std::max(0.0f, v[j] + bias[j]);
        break;
    }
  }
}

// Attention of one sequence (tokens [begin, begin + n)) for every head: context = softmax(Q K^T
// / sqrt(d), masked keys excluded) V, written into context[begin.., head * d..].
void SequenceAttention(const EncoderNetwork& net, const PackedBatch& batch, const float* qkv,
                       int64_t begin, int n, float* scores, float* context) {
  const int h = net.hidden;
  const int d = net.head_size();
  const int ld = 3 * h;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const uint8_t* attend = batch.attend.data() + begin;
  for (int head = 0; head < net.heads; ++head) {
    const float* q = qkv + begin * ld + head * d;
    const float* k = q + h;
    const float* v = q + 2 * h;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, d, scale, q, ld, k, ld, 0.0f, scores,
                n);
    for (int i = 0; i < n; ++i) {
      float* row = scores + static_cast<int64_t>(i) * n;
      float max = -std::numeric_limits<float>::infinity();
      for (int j = 0; j < n; ++j) {
        if (attend[j]) max = std::max(max, row[j]);
      }
      float sum = 0.0f;
      for (int j = 0; j < n; ++j) {
        row[j] = attend[j] ? std::exp(row[j] - max) : 0.0f;
        sum += row[j];
      }
      const float inv = 1.0f / sum;
      for (int j = 0; j < n; ++j) row[j] *= inv;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d, n, 1.0f, scores, n, v, ld, 0.0f,
                context + begin * h + head * d, h);
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

void EncoderWorkspace::Reserve(const EncoderNetwork& net, int64_t tokens, int sequences,
                               int64_t longest) {
  auto grow = [](std::vector<float>& v, int64_t size) {
    if (static_cast<int64_t>(v.size()) < size) v.resize(static_cast<size_t>(size));
  };
  const int64_t h = net.hidden;
  grow(hidden_, tokens * h);
  grow(qkv_, tokens * 3 * h);
  grow(context_, tokens * h);
  grow(projected_, tokens * h);
  grow(intermediate_, tokens * net.intermediate);
  grow(scores_, longest * longest);
  grow(first_tokens_, int64_t{sequences} * h);
  grow(head_, int64_t{sequences} * h);
}

void Forward(const EncoderNetwork& net, const PackedBatch& batch, EncoderWorkspace& ws) {
  const int64_t tokens = batch.tokens();
  int64_t longest = 0;
  for (int s = 0; s < batch.sequences(); ++s) {
    longest = std::max(longest, batch.offsets[s + 1] - batch.offsets[s]);
  }
  ws.Reserve(net, tokens, batch.sequences(), longest);
  const int h = net.hidden;
  float* x = ws.hidden_.data();

  // Embeddings: word + token type + position (HF's order of addition), then LayerNorm.
  for (int64_t t = 0; t < tokens; ++t) {
    const float* word = net.word_embeddings.data() + int64_t{batch.token_ids[t]} * h;
    const float* position = net.position_embeddings.data() + int64_t{batch.positions[t]} * h;
    float* xt = x + t * h;
    if (!net.type_embeddings.empty()) {
      const float* type = net.type_embeddings.data() + int64_t{batch.token_types[t]} * h;
      for (int j = 0; j < h; ++j) xt[j] = word[j] + type[j] + position[j];
    } else {
      for (int j = 0; j < h; ++j) xt[j] = word[j] + position[j];
    }
  }
  LayerNormRows(x, net.embedding_norm_gamma, net.embedding_norm_beta, tokens, h,
                net.layer_norm_eps);

  for (const EncoderLayer& layer : net.encoder_layers) {
    // One GEMM for query, key and value; their biases in the same pass that reads the rows.
    Linear(x, tokens, h, layer.qkv_weight, 3 * h, ws.qkv_.data());
    for (int64_t t = 0; t < tokens; ++t) {
      float* row = ws.qkv_.data() + t * 3 * h;
      for (int j = 0; j < 3 * h; ++j) row[j] += layer.qkv_bias[j];
    }
    for (int s = 0; s < batch.sequences(); ++s) {
      const int64_t begin = batch.offsets[s];
      const int n = static_cast<int>(batch.offsets[s + 1] - begin);
      SequenceAttention(net, batch, ws.qkv_.data(), begin, n, ws.scores_.data(),
                        ws.context_.data());
    }
    Linear(ws.context_.data(), tokens, h, layer.attention_out_weight, h, ws.projected_.data());
    BiasResidualLayerNorm(ws.projected_.data(), layer.attention_out_bias,
                          layer.attention_norm_gamma, layer.attention_norm_beta, tokens, h,
                          net.layer_norm_eps, x);
    Linear(x, tokens, h, layer.intermediate_weight, net.intermediate, ws.intermediate_.data());
    BiasActivate(ws.intermediate_.data(), layer.intermediate_bias, tokens, net.intermediate,
                 net.activation);
    Linear(ws.intermediate_.data(), tokens, net.intermediate, layer.output_weight, h,
           ws.projected_.data());
    BiasResidualLayerNorm(ws.projected_.data(), layer.output_bias, layer.output_norm_gamma,
                          layer.output_norm_beta, tokens, h, net.layer_norm_eps, x);
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
