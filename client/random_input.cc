#include "client/random_input.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/tensor_codec.h"
#include "common/status_macros.h"
#include "common/wire/bytes_elements.h"
#include "common/wire/float16.h"
#include "common/wire/raw_value.h"
#include "common/wire/shape.h"

namespace sluice::client {
namespace {

// splitmix64: a tiny, fully specified generator, so RandomInput gives the same bytes everywhere
// (the distributions of <random> are implementation-defined).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1), from the top 24 bits (exactly representable as float).
  float NextUnitFloat() {
    return static_cast<float>(Next() >> 40) / static_cast<float>(1 << 23) - 1.0f;
  }

 private:
  uint64_t state_;
};

}  // namespace

absl::StatusOr<std::string> RandomInput(absl::string_view datatype, absl::Span<const int64_t> shape,
                                        uint64_t seed) {
  ASSIGN_OR_RETURN(int64_t element_size, DataTypeSize(datatype));
  absl::StatusOr<int64_t> count = ElementCount(shape);
  if (!count.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("random ", datatype, " shape ",
                                                   wire::ShapeToString(shape), ": ",
                                                   count.status().message()));
  }
  SplitMix64 rng(seed);
  std::string raw;
  raw.reserve(element_size > 0 ? *count * element_size : *count * 7);
  for (int64_t i = 0; i < *count; ++i) {
    const uint64_t bits = rng.Next();
    if (datatype == "BOOL") {
      raw.push_back(static_cast<char>(bits & 1));
    } else if (datatype == "BYTES") {
      wire::AppendBytesElement(raw, absl::StrCat(bits % 1000));
    } else if (datatype == "FP32") {
      wire::AppendRawValue<float>(raw, rng.NextUnitFloat());
    } else if (datatype == "FP64") {
      wire::AppendRawValue<double>(raw, rng.NextUnitFloat());
    } else if (datatype == "FP16") {
      wire::AppendRawValue<uint16_t>(raw, FloatToHalf(rng.NextUnitFloat()));
    } else if (datatype == "BF16") {
      wire::AppendRawValue<uint16_t>(raw, FloatToBFloat16(rng.NextUnitFloat()));
    } else {
      // Integers: small values, so sums and products of a few stay in range for every width.
      const bool is_signed = datatype[0] == 'I';
      const int64_t v =
          is_signed ? static_cast<int64_t>(bits % 64) - 32 : static_cast<int64_t>(bits % 64);
      // Little-endian: the low `element_size` bytes of the two's complement value.
      char bytes[8];
      std::memcpy(bytes, &v, 8);
      raw.append(bytes, element_size);
    }
  }
  return raw;
}

absl::StatusOr<inference::ModelInferRequest> MakeRandomRequest(
    const inference::ModelMetadataResponse& metadata, int64_t batch_size, uint64_t seed,
    int64_t sequence_length, int64_t token_id_limit) {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch size ", batch_size, " is not >= 1"));
  }
  if (sequence_length < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence length ", sequence_length, " is not >= 1"));
  }
  if (token_id_limit < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("token id limit ", token_id_limit, " is not >= 1"));
  }
  inference::ModelInferRequest request;
  request.set_model_name(metadata.name());
  // An encoder with a tokenizer takes `text` (and `text_pair`) or token ids, never both: random
  // inputs are token ids.
  bool has_token_ids = false;
  for (const auto& tensor : metadata.inputs()) has_token_ids |= tensor.name() == "input_ids";
  for (int i = 0; i < metadata.inputs_size(); ++i) {
    const auto& tensor = metadata.inputs(i);
    if (has_token_ids && tensor.datatype() == "BYTES" &&
        (tensor.name() == "text" || tensor.name() == "text_pair")) {
      continue;
    }
    std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] < 0) shape[d] = d == 0 ? batch_size : sequence_length;
    }
    absl::StatusOr<std::string> raw = RandomInput(tensor.datatype(), shape, seed + i);
    const bool int_type = tensor.datatype() == "INT64" || tensor.datatype() == "INT32";
    if (raw.ok() && int_type &&
        (tensor.name() == "input_ids" || tensor.name() == "attention_mask" ||
         tensor.name() == "token_type_ids")) {
      // A sequence model's token ids in [0, token_id_limit) (the signed draw above has
      // negatives: drawn again), its mask all ones (every token real), its segment ids 0.
      const size_t width = tensor.datatype() == "INT64" ? 8 : 4;
      SplitMix64 ids(seed + static_cast<uint64_t>(i));
      for (size_t at = 0; at < raw->size(); at += width) {
        int64_t value = 0;
        if (tensor.name() == "input_ids") {
          value = static_cast<int64_t>(ids.Next() % static_cast<uint64_t>(token_id_limit));
        } else if (tensor.name() == "attention_mask") {
          value = 1;
        }
        // Little-endian: the low `width` bytes.
        std::memcpy(raw->data() + at, &value, width);
      }
    }
    if (!raw.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", tensor.name(), "': ", raw.status().message()));
    }
    RETURN_IF_ERROR(AddRawInput(request, tensor.name(), tensor.datatype(), shape, *std::move(raw)));
  }
  return request;
}

absl::StatusOr<LengthRange> ParseLengthRange(absl::string_view text, int64_t max_length) {
  LengthRange range;
  const size_t colon = text.find(':');
  const bool parsed = colon == absl::string_view::npos
                          ? absl::SimpleAtoi(text, &range.min)
                          : absl::SimpleAtoi(text.substr(0, colon), &range.min) &&
                                absl::SimpleAtoi(text.substr(colon + 1), &range.max);
  if (colon == absl::string_view::npos) range.max = range.min;
  if (!parsed || range.min < 1 || range.max < range.min || range.max > max_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad sequence length '", text,
        "' (expected N or MIN:MAX with 1 <= MIN <= MAX <= ", max_length, ", e.g. 128 or 8:256)"));
  }
  return range;
}

int64_t DrawLength(const LengthRange& range, uint64_t seed, uint64_t index) {
  if (range.fixed()) return range.min;
  // One splitmix64 step keyed by (seed, index): successive indexes are independent draws. The
  // 64 bits scaled by the span (Lemire's multiply-shift) are uniform up to span / 2^64.
  SplitMix64 rng(seed ^ (index * 0xd1b54a32d192ed03ULL));
  const uint64_t span = static_cast<uint64_t>(range.max - range.min) + 1;
  const auto scaled = static_cast<unsigned __int128>(rng.Next()) * span;
  return range.min + static_cast<int64_t>(scaled >> 64);
}

}  // namespace sluice::client
