#include "engine/models/encoder/encoder_batch.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sluice::engine::models::encoder {
namespace {

// A bucket's token count at most (the encoder's max_batch_tokens limit).
constexpr int64_t kMaxBucketTokens = int64_t{1} << 22;
// The smallest default bucket: below this, a batch costs launch overhead, not tokens.
constexpr int64_t kMinDefaultBucketTokens = 16;

absl::StatusOr<std::vector<TokenBucket>> ParseBuckets(const std::string& text) {
  std::vector<TokenBucket> buckets;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    const std::vector<absl::string_view> fields = absl::StrSplit(part, 'x');
    TokenBucket bucket;
    int64_t sequences = 0;
    if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &sequences) ||
        !absl::SimpleAtoi(fields[1], &bucket.tokens) || sequences < 1 || bucket.tokens < 1 ||
        bucket.tokens > kMaxBucketTokens || sequences > bucket.tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", kCudaBucketsParam, "': '", part,
          "' is not SEQUENCESxTOKENS with 1 <= sequences <= tokens <= ", kMaxBucketTokens));
    }
    bucket.sequences = static_cast<int>(sequences);
    buckets.push_back(bucket);
  }
  if (buckets.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", kCudaBucketsParam, "' lists no bucket"));
  }
  return buckets;
}

}  // namespace

RequestTokens FindRequestTokens(std::span<const TensorView> inputs) {
  RequestTokens found;
  for (const TensorView& input : inputs) {
    if (input.name == kInputIdsName) found.ids = &input;
    if (input.name == kAttentionMaskName) found.mask = &input;
    if (input.name == kTokenTypeIdsName) found.types = &input;
  }
  return found;
}

int64_t IntAt(const TensorView& tensor, int64_t i) {
  if (tensor.dtype == DataType::kInt64) {
    int64_t v;
    std::memcpy(&v, tensor.data.data() + i * 8, 8);
    return v;
  }
  int32_t v;
  std::memcpy(&v, tensor.data.data() + i * 4, 4);
  return v;
}

int64_t RowLength(const RequestTokens& in, int64_t r, int64_t seq) {
  if (in.mask == nullptr) return seq;
  for (int64_t c = seq; c > 0; --c) {
    if (IntAt(*in.mask, r * seq + c - 1) != 0) return c;
  }
  return 0;
}

absl::StatusOr<RequestShape> PackRequest(const EncoderNetwork& net, const RequestTokens& in,
                                         PackedBatch& batch) {
  if (in.ids == nullptr || in.ids->shape.size() != 2) {
    return absl::InternalError("encoder: a request without a bound [batch, seq] input_ids");
  }
  const RequestShape shape{.rows = in.ids->shape[0], .seq = in.ids->shape[1]};
  for (int64_t r = 0; r < shape.rows; ++r) {
    const int64_t length = RowLength(in, r, shape.seq);
    int64_t real = 0;  // RoBERTa: non-pad tokens so far
    for (int64_t c = 0; c < length; ++c) {
      const int64_t i = r * shape.seq + c;
      const int32_t id = static_cast<int32_t>(IntAt(*in.ids, i));
      batch.token_ids.push_back(id);
      batch.token_types.push_back(in.types == nullptr ? 0
                                                      : static_cast<int32_t>(IntAt(*in.types, i)));
      batch.attend.push_back(in.mask == nullptr || IntAt(*in.mask, i) != 0);
      if (net.positions_after_pad()) {
        // create_position_ids_from_input_ids: pads sit at pad_token_id, the others count on from
        // pad_token_id + 1.
        if (id != net.pad_token_id) ++real;
        batch.positions.push_back(id == net.pad_token_id
                                      ? net.pad_token_id
                                      : static_cast<int32_t>(net.pad_token_id + real));
      } else {
        batch.positions.push_back(static_cast<int32_t>(c));
      }
    }
    batch.offsets.push_back(batch.tokens());
  }
  return shape;
}

void ApplyScoreActivation(ScoreActivation activation, float* row, int width) {
  switch (activation) {
    case ScoreActivation::kIdentity:
      return;
    case ScoreActivation::kSigmoid:
      for (int i = 0; i < width; ++i) row[i] = 1.0f / (1.0f + std::exp(-row[i]));
      return;
    case ScoreActivation::kSoftmax: {
      float max = row[0];
      for (int i = 1; i < width; ++i) max = std::max(max, row[i]);
      double sum = 0;
      for (int i = 0; i < width; ++i) {
        row[i] = std::exp(row[i] - max);
        sum += row[i];
      }
      for (int i = 0; i < width; ++i) row[i] = static_cast<float>(row[i] / sum);
      return;
    }
  }
}

std::vector<bool> WantedOutputs(const ModelConfig& config,
                                const std::vector<std::string>& requested) {
  std::vector<bool> flags(config.outputs.size(), requested.empty());
  for (const std::string& name : requested) {
    for (size_t o = 0; o < config.outputs.size(); ++o) {
      if (config.outputs[o].name == name) flags[o] = true;
    }
  }
  return flags;
}

std::vector<Tensor> RequestOutputs(const ModelConfig& config, const EncoderNetwork& net,
                                   const PackedBatch& batch, const RequestTokens& in,
                                   RequestShape shape, int first_sequence,
                                   const std::vector<bool>& wanted, const PackedResults& results) {
  const int h = net.hidden;
  const auto [rows, seq] = shape;
  std::vector<Tensor> out(config.outputs.size());
  for (size_t o = 0; o < config.outputs.size(); ++o) {
    if (!wanted[o]) continue;
    const std::string& name = config.outputs[o].name;
    Tensor& tensor = out[o];
    tensor.name = name;
    tensor.dtype = DataType::kFp32;
    if (name == kInputIdsName) {
      // The tokens the request ran with, [rows, seq], 0 past each row's end.
      tensor.dtype = DataType::kInt64;
      tensor.shape = {rows, seq};
      tensor.data.assign(static_cast<size_t>(rows * seq) * sizeof(int64_t), std::byte{0});
      auto* values = reinterpret_cast<int64_t*>(tensor.data.data());
      for (int64_t row = 0; row < rows; ++row) {
        const int64_t length = RowLength(in, row, seq);
        for (int64_t c = 0; c < length; ++c) values[row * seq + c] = IntAt(*in.ids, row * seq + c);
      }
    } else if (name == kLastHiddenStateName) {
      tensor.shape = {rows, seq, h};
      // The request's rows are contiguous in the packed batch; without trailing padding they are
      // the whole tensor, copied once (no zero fill first). Padded rows get zeros past their
      // packed length.
      const int64_t first = batch.offsets[first_sequence];
      const int64_t packed = batch.offsets[first_sequence + rows] - first;
      if (packed == rows * seq) {
        const auto* source = reinterpret_cast<const std::byte*>(results.hidden + first * h);
        tensor.data.assign(source, source + static_cast<size_t>(packed * h) * sizeof(float));
      } else {
        tensor.data.assign(static_cast<size_t>(rows * seq * h) * sizeof(float), std::byte{0});
        for (int64_t row = 0; row < rows; ++row) {
          const int s = first_sequence + static_cast<int>(row);
          const int64_t begin = batch.offsets[s];
          const int64_t length = batch.offsets[s + 1] - begin;
          std::memcpy(tensor.data.data() + row * seq * h * sizeof(float),
                      results.hidden + begin * h, static_cast<size_t>(length * h) * sizeof(float));
        }
      }
    } else {
      const int width = name == kEmbeddingName      ? net.embedding_size()
                        : name == kPoolerOutputName ? h
                                                    : net.num_labels;
      const float* source = name == kEmbeddingName      ? results.embedding
                            : name == kPoolerOutputName ? results.pooler
                                                        : results.logits;
      tensor.shape = {rows, width};
      tensor.data.resize(static_cast<size_t>(rows * width) * sizeof(float));
      std::memcpy(tensor.data.data(), source + int64_t{first_sequence} * width, tensor.data.size());
      if (name == kScoreName) {
        auto* scores = reinterpret_cast<float*>(tensor.data.data());
        for (int64_t row = 0; row < rows; ++row) {
          ApplyScoreActivation(net.score_activation, scores + row * width, width);
        }
      }
    }
  }
  return out;
}

const char* ComputeTypeName(ComputeType type) {
  switch (type) {
    case ComputeType::kCheckpoint:
      return "checkpoint";
    case ComputeType::kFp32:
      return "fp32";
    case ComputeType::kFp16:
      return "fp16";
    case ComputeType::kBf16:
      return "bf16";
  }
  return "?";
}

absl::StatusOr<GpuOptions> ParseGpuOptions(const ModelConfig& config, int64_t max_batch_tokens) {
  GpuOptions options;
  const auto find = [&](const char* key) -> const std::string* {
    auto it = config.parameters.find(key);
    return it == config.parameters.end() ? nullptr : &it->second;
  };
  if (const std::string* value = find(kComputeTypeParam); value != nullptr) {
    bool known = false;
    for (ComputeType type :
         {ComputeType::kCheckpoint, ComputeType::kFp32, ComputeType::kFp16, ComputeType::kBf16}) {
      if (*value == ComputeTypeName(type)) {
        options.compute = type;
        known = true;
      }
    }
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", kComputeTypeParam, "' = '", *value,
                       "' must be one of checkpoint, fp32, fp16, bf16"));
    }
  }
  if (const std::string* value = find(kAllowTf32Param); value != nullptr) {
    if (*value != "true" && *value != "false") {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", kAllowTf32Param, "' = '",
                                                     *value, "' must be \"true\" or \"false\""));
    }
    options.allow_tf32 = *value == "true";
  }
  const int max_sequences = std::max(config.max_batch_size, 1);
  if (const std::string* value = find(kCudaBucketsParam); value != nullptr) {
    absl::StatusOr<std::vector<TokenBucket>> buckets = ParseBuckets(*value);
    if (!buckets.ok()) return buckets.status();
    options.buckets = *std::move(buckets);
  } else {
    for (int64_t tokens = max_batch_tokens, k = 0; k < 4; tokens /= 4, ++k) {
      if (k > 0 && tokens < kMinDefaultBucketTokens) break;
      options.buckets.push_back(
          {.sequences = static_cast<int>(std::min<int64_t>(max_sequences, tokens)),
           .tokens = tokens});
    }
  }
  std::sort(options.buckets.begin(), options.buckets.end(),
            [](const TokenBucket& a, const TokenBucket& b) {
              return a.tokens != b.tokens ? a.tokens < b.tokens : a.sequences < b.sequences;
            });
  options.buckets.erase(std::unique(options.buckets.begin(), options.buckets.end()),
                        options.buckets.end());
  if (static_cast<int>(options.buckets.size()) > kMaxTokenBuckets) {
    return absl::InvalidArgumentError(absl::StrCat("parameter '", kCudaBucketsParam, "' lists ",
                                                   options.buckets.size(), " buckets; at most ",
                                                   kMaxTokenBuckets));
  }
  // A batch the batcher forms holds at most max_batch_size sequences of at least one token each
  // within the token budget (a lone request above the budget aside).
  const int full_sequences = static_cast<int>(std::min<int64_t>(max_sequences, max_batch_tokens));
  bool holds_full_batch = false;
  for (const TokenBucket& bucket : options.buckets) {
    holds_full_batch |= bucket.sequences >= full_sequences && bucket.tokens >= max_batch_tokens;
  }
  if (!holds_full_batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter '", kCudaBucketsParam, "': no bucket holds a full batch of ", full_sequences,
        " sequences (max_batch_size) and ", max_batch_tokens,
        " tokens (max_batch_tokens); add a bucket ", full_sequences, "x", max_batch_tokens));
  }
  return options;
}

}  // namespace sluice::engine::models::encoder
