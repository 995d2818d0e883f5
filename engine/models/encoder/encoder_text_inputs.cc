#include "engine/models/encoder/encoder_text_inputs.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/wire/bytes_elements.h"
#include "engine/core/tensor.h"

namespace sluice::engine::models::encoder {
namespace {

constexpr absl::string_view kInputIds = "input_ids";
constexpr absl::string_view kAttentionMask = "attention_mask";
constexpr absl::string_view kTokenTypeIds = "token_type_ids";
constexpr absl::string_view kText = "text";
constexpr absl::string_view kTextPair = "text_pair";

// What a prepared (tokenized) request owns: its token tensors, and whatever its text inputs'
// views pointed into (the RPC message), kept until the request is done.
struct PreparedInputs {
  std::shared_ptr<const void> previous;
  std::vector<Tensor> tensors;
};

// Reads the `count` elements of a BYTES tensor (validated framing) as views into its data.
std::vector<absl::string_view> BytesElements(const TensorView& tensor, int64_t count) {
  std::vector<absl::string_view> elements;
  elements.reserve(static_cast<size_t>(count));
  wire::BytesElementReader reader(tensor.data);
  absl::string_view element;
  while (static_cast<int64_t>(elements.size()) < count && reader.Next(element)) {
    elements.push_back(element);
  }
  return elements;
}

// Python's str.isspace() codepoints, which sentence-transformers' str.strip() removes.
bool IsPythonSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

// The codepoint of the UTF-8 sequence `bytes` (1-4 bytes, not validated: a malformed one decodes
// to something that is not a space, and the tokenizer refuses it later by its byte offset).
char32_t Decode(absl::string_view bytes) {
  const auto b = [&](size_t i) { return static_cast<char32_t>(static_cast<uint8_t>(bytes[i])); };
  switch (bytes.size()) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1f) << 6) | (b(1) & 0x3f);
    case 3:
      return ((b(0) & 0x0f) << 12) | ((b(1) & 0x3f) << 6) | (b(2) & 0x3f);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3f) << 12) | ((b(2) & 0x3f) << 6) | (b(3) & 0x3f);
  }
}

size_t SequenceLength(uint8_t lead) {
  return lead < 0x80 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
}

// `text` without leading and trailing whitespace, as Python's str.strip().
absl::string_view StripLikePython(absl::string_view text) {
  while (!text.empty()) {
    const size_t n = std::min(SequenceLength(static_cast<uint8_t>(text[0])), text.size());
    if (!IsPythonSpace(Decode(text.substr(0, n)))) break;
    text.remove_prefix(n);
  }
  while (!text.empty()) {
    size_t start = text.size() - 1;  // back over continuation bytes to the lead byte
    while (start > 0 && text.size() - start < 4 &&
           (static_cast<uint8_t>(text[start]) & 0xc0) == 0x80) {
      --start;
    }
    if (!IsPythonSpace(Decode(text.substr(start)))) break;
    text.remove_suffix(text.size() - start);
  }
  return text;
}

}  // namespace

absl::StatusOr<std::unique_ptr<const EncoderTextInputs>> EncoderTextInputs::Load(
    const std::string& folder, int max_sequence_length, int vocab_size) {
  text::TokenizerOptions options;
  absl::StatusOr<int> limit = text::ReadMaxSequenceLength(folder);
  if (!limit.ok() && !absl::IsNotFound(limit.status())) return limit.status();
  options.max_length = limit.ok() ? std::min(*limit, max_sequence_length) : max_sequence_length;
  absl::StatusOr<std::unique_ptr<text::Tokenizer>> tokenizer =
      text::Tokenizer::LoadFolder(folder, options);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat("tokenizer: ", tokenizer.status().message()));
  }
  if ((*tokenizer)->vocab_size() > vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: its vocabulary has ", (*tokenizer)->vocab_size(),
                     " tokens, more than the checkpoint's vocab_size ", vocab_size));
  }
  ASSIGN_OR_RETURN(text::SentencePrompts prompts, text::ReadSentencePrompts(folder));
  std::error_code ec;
  const bool strip = std::filesystem::exists(std::filesystem::path(folder) / "modules.json", ec);
  return std::unique_ptr<const EncoderTextInputs>(
      new EncoderTextInputs(*std::move(tokenizer), std::move(prompts), max_sequence_length, strip));
}

absl::Status EncoderTextInputs::Prepare(const std::string& model, bool token_types,
                                        InferenceRequest& request) const {
  const auto fail = [&](absl::string_view message) {
    return absl::InvalidArgumentError(absl::StrCat("model '", model, "': ", message));
  };
  const TensorView* text = nullptr;
  const TensorView* pair = nullptr;
  for (const TensorView& input : request.inputs) {
    if (input.name == kText) text = &input;
    if (input.name == kTextPair) pair = &input;
  }
  if (text == nullptr) {
    return absl::InternalError(
        absl::StrCat("model '", model, "': asked to tokenize a request without text"));
  }
  absl::StatusOr<absl::string_view> prompt = prompts_.Resolve(request.prompt_name);
  if (!prompt.ok()) return fail(prompt.status().message());
  const int64_t rows = text->shape[0];
  const std::vector<absl::string_view> firsts = BytesElements(*text, rows);
  std::vector<absl::string_view> seconds;
  if (pair != nullptr) seconds = BytesElements(*pair, rows);
  // The request's truncation parameters (TextTruncation), as the tokenizer's per-call options.
  text::EncodeOptions encode_options;
  encode_options.truncate = request.text_truncation.truncate;
  if (request.text_truncation.from_left) {
    encode_options.direction = text::TruncationDirection::kLeft;
  }
  encode_options.max_second_tokens = static_cast<int>(std::clamp<int64_t>(
      request.text_truncation.max_text_pair_tokens, 0, std::numeric_limits<int>::max()));
  std::vector<text::Encoding> encodings;
  encodings.reserve(static_cast<size_t>(rows));
  int64_t longest = 0;
  int64_t tokens = 0;
  std::string prompted;  // the prompt + one text, reused across the rows
  for (int64_t r = 0; r < rows; ++r) {
    absl::string_view first = firsts[r];
    if (!prompt->empty()) {
      // As sentence-transformers: the prompt prepended to the (first) text, then tokenized.
      prompted.assign(prompt->data(), prompt->size());
      prompted.append(first.data(), first.size());
      first = prompted;
    }
    absl::string_view second = pair == nullptr ? absl::string_view() : seconds[r];
    if (strip_) {
      first = StripLikePython(first);
      second = StripLikePython(second);
    }
    absl::StatusOr<text::Encoding> encoding =
        pair == nullptr ? tokenizer_->Encode(first, encode_options)
                        : tokenizer_->EncodePair(first, second, encode_options);
    if (!encoding.ok()) {
      return fail(absl::StrCat("input '", pair == nullptr ? kText : "text/text_pair",
                               "' batch item ", r, ": ", encoding.status().message()));
    }
    if (encoding->num_tokens() == 0) {
      return fail(absl::StrCat("input '", kText, "' batch item ", r,
                               " gives no tokens (this tokenizer adds no special tokens)"));
    }
    if (encoding->num_tokens() > max_sequence_length_) {
      return fail(absl::StrCat("input '", kText, "' batch item ", r, " is ", encoding->num_tokens(),
                               " tokens, more than the limit of ", max_sequence_length_,
                               " (the checkpoint's position table)"));
    }
    longest = std::max<int64_t>(longest, encoding->num_tokens());
    tokens += encoding->num_tokens();
    encodings.push_back(*std::move(encoding));
  }
  auto owned = std::make_shared<PreparedInputs>();
  owned->previous = std::move(request.keepalive);
  for (absl::string_view name : {kInputIds, kAttentionMask, kTokenTypeIds}) {
    if (name == kTokenTypeIds && !token_types) continue;
    Tensor tensor{std::string(name), DataType::kInt64, {rows, longest}, {}};
    tensor.data.assign(static_cast<size_t>(rows * longest) * sizeof(int64_t), std::byte{0});
    auto* values = reinterpret_cast<int64_t*>(tensor.data.data());
    for (int64_t r = 0; r < rows; ++r) {
      const text::Encoding& encoding = encodings[r];
      for (int c = 0; c < encoding.num_tokens(); ++c) {
        values[r * longest + c] = name == kInputIds        ? encoding.ids[c]
                                  : name == kAttentionMask ? 1
                                                           : encoding.type_ids[c];
      }
    }
    owned->tensors.push_back(std::move(tensor));
  }
  // Config order (input_ids, attention_mask[, token_type_ids]), as a token-id request binds.
  request.inputs.clear();
  for (const Tensor& tensor : owned->tensors) request.inputs.push_back(tensor.View());
  request.keepalive = std::move(owned);
  request.token_count = tokens;
  return absl::OkStatus();
}

}  // namespace sluice::engine::models::encoder
