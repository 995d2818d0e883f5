#include "text/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "text/unicode.h"

namespace sluice::text {
namespace {

using Json = nlohmann::json;

enum class Strategy { kLongestFirst, kOnlyFirst, kOnlySecond };
enum class Direction { kRight, kLeft };

struct NormalizerConfig {
  bool clean_text = false;
  bool handle_chinese_chars = false;
  bool strip_accents = false;
  bool lowercase = false;
};

// One item of a post-processing template: a special token's ids, or sequence A (0) / B (1).
struct TemplateItem {
  int sequence = -1;  // -1: special token
  std::vector<int32_t> ids;
  int32_t type_id = 0;
};

struct TruncationConfig {
  int max_length = 0;
  Strategy strategy = Strategy::kLongestFirst;
  Direction direction = Direction::kRight;
};

// An added token matched in the raw text (normalized: false, no stripping).
struct AddedToken {
  std::string content;
  int32_t id = 0;
};

absl::Status Invalid(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    return absl::InternalError(absl::StrCat("error reading '", path, "'"));
  }
  return std::move(contents).str();
}

bool FileExists(const std::string& path) { return std::ifstream(path).good(); }

absl::StatusOr<Json> ParseJson(absl::string_view text, absl::string_view source) {
  Json json = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return Invalid(source, "malformed JSON");
  }
  if (!json.is_object()) {
    return Invalid(source, "not a JSON object");
  }
  return json;
}

// The string member `key` of `object`, or `fallback` when it is absent or null.
absl::StatusOr<std::string> OptionalString(const Json& object, const char* key,
                                           std::string fallback, absl::string_view source) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    return fallback;
  }
  if (!it->is_string()) {
    return Invalid(source, absl::StrCat("'", key, "' is not a string"));
  }
  return it->get<std::string>();
}

absl::StatusOr<bool> OptionalBool(const Json& object, const char* key, bool fallback,
                                  absl::string_view source) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    return fallback;
  }
  if (!it->is_boolean()) {
    return Invalid(source, absl::StrCat("'", key, "' is not a boolean"));
  }
  return it->get<bool>();
}

absl::StatusOr<int64_t> OptionalInt(const Json& object, const char* key, int64_t fallback,
                                    absl::string_view source) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    return fallback;
  }
  if (!it->is_number_integer()) {
    return Invalid(source, absl::StrCat("'", key, "' is not an integer"));
  }
  return it->get<int64_t>();
}

// The "type" member of a component.
absl::StatusOr<std::string> ComponentType(const Json& component, absl::string_view what,
                                          absl::string_view source) {
  if (!component.is_object()) {
    return Invalid(source, absl::StrCat(what, " is not an object"));
  }
  auto it = component.find("type");
  if (it == component.end() || !it->is_string()) {
    return Invalid(source, absl::StrCat(what, " has no \"type\""));
  }
  return it->get<std::string>();
}

}  // namespace

struct Tokenizer::Impl {
  // The vocabulary: keys are views into vocab_storage, which is never modified after loading.
  std::string vocab_storage;
  absl::flat_hash_map<absl::string_view, int32_t> vocab;
  int vocab_size = 0;
  // The longest vocabulary entry in bytes: WordPiece never looks up anything longer (same result
  // as trying and failing, without the hashing).
  size_t max_token_bytes = 0;

  // unicode::CharFlagTable(), looked up once per character.
  const uint8_t* char_flags = unicode::CharFlagTable();
  NormalizerConfig normalizer;
  bool bert_pre_tokenizer = false;  // false: no pre-tokenizer (the whole text is one word)
  int32_t unk_id = 0;
  std::string continuing_prefix = "##";
  size_t max_input_chars_per_word = 100;

  // Longest first, so the first match at a position is the longest (leftmost-longest).
  std::vector<AddedToken> added_tokens;
  bool added_first_byte[256] = {};

  std::vector<TemplateItem> single_template;
  std::vector<TemplateItem> pair_template;
  int added_single = 0;  // special tokens the templates add
  int added_pair = 0;

  std::optional<TruncationConfig> json_truncation;
  int max_length = 0;  // 0: no limit
  bool truncate = false;
  Strategy strategy = Strategy::kLongestFirst;
  Direction direction = Direction::kRight;

  // Per-call working memory (a local of Encode, never shared between threads).
  struct Scratch {
    std::string word;               // the current word's UTF-8 bytes
    std::vector<uint32_t> ends;     // byte offset just past each of its characters
    std::string piece;              // continuing prefix + the rest of the word
    std::vector<char32_t> pending;  // combining marks waiting for canonical reordering
  };

  absl::Status AddVocab(std::vector<std::pair<std::string, int32_t>> entries,
                        absl::string_view source);
  absl::Status SetAddedTokens(const Json& list, absl::string_view source);
  void ApplyOptions(const TokenizerOptions& options);
  int32_t Lookup(absl::string_view token) const;

  absl::Status EncodeSequence(absl::string_view text, absl::string_view name,
                              std::vector<int32_t>* ids) const;
  void EncodeSegment(absl::string_view segment, Scratch& scratch, std::vector<int32_t>* ids) const;
  void EmitNormalized(char32_t c, Scratch& scratch, std::vector<int32_t>* ids) const;
  void EmitCased(char32_t c, Scratch& scratch, std::vector<int32_t>* ids) const;
  void FlushPending(Scratch& scratch, std::vector<int32_t>* ids) const;
  void PreTokenize(char32_t c, Scratch& scratch, std::vector<int32_t>* ids) const;
  void EndWord(Scratch& scratch, std::vector<int32_t>* ids) const;
  void WordPiece(Scratch& scratch, std::vector<int32_t>* ids) const;
  absl::StatusOr<Encoding> Finish(std::vector<int32_t> a, std::vector<int32_t>* b) const;
};

absl::Status Tokenizer::Impl::AddVocab(std::vector<std::pair<std::string, int32_t>> entries,
                                       absl::string_view source) {
  size_t bytes = 0;
  for (const auto& [token, id] : entries) {
    bytes += token.size();
  }
  vocab_storage.reserve(bytes);
  for (const auto& [token, id] : entries) {
    vocab_storage.append(token);
  }
  vocab.reserve(entries.size());
  size_t offset = 0;
  for (const auto& [token, id] : entries) {
    if (id < 0) {
      return Invalid(source, absl::StrCat("vocabulary entry '", token, "' has negative id ", id));
    }
    absl::string_view key(vocab_storage.data() + offset, token.size());
    offset += token.size();
    if (!vocab.emplace(key, id).second) {
      return Invalid(source, absl::StrCat("vocabulary entry '", token, "' is repeated"));
    }
    vocab_size = std::max(vocab_size, id + 1);
    max_token_bytes = std::max(max_token_bytes, token.size());
  }
  return absl::OkStatus();
}

int32_t Tokenizer::Impl::Lookup(absl::string_view token) const {
  auto it = vocab.find(token);
  return it == vocab.end() ? -1 : it->second;
}

absl::Status Tokenizer::Impl::SetAddedTokens(const Json& list, absl::string_view source) {
  if (list.is_null()) {
    return absl::OkStatus();
  }
  if (!list.is_array()) {
    return Invalid(source, "'added_tokens' is not an array");
  }
  for (const Json& token : list) {
    if (!token.is_object() || !token.contains("content") || !token["content"].is_string() ||
        !token.contains("id") || !token["id"].is_number_integer()) {
      return Invalid(source, "an added token lacks \"content\" or \"id\"");
    }
    AddedToken added{token["content"].get<std::string>(), token["id"].get<int32_t>()};
    if (added.content.empty()) {
      return Invalid(source, "an added token is empty");
    }
    for (const char* flag : {"single_word", "lstrip", "rstrip", "normalized"}) {
      ASSIGN_OR_RETURN(bool on, OptionalBool(token, flag, false, source));
      if (on) {
        return Invalid(source, absl::StrCat("added token '", added.content, "' with ", flag,
                                            ": true is not supported"));
      }
    }
    if (unicode::FindInvalidUtf8(added.content) != absl::string_view::npos) {
      return Invalid(source, "an added token is not valid UTF-8");
    }
    vocab_size = std::max(vocab_size, added.id + 1);
    added_first_byte[static_cast<unsigned char>(added.content[0])] = true;
    added_tokens.push_back(std::move(added));
  }
  std::stable_sort(
      added_tokens.begin(), added_tokens.end(),
      [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  return absl::OkStatus();
}

void Tokenizer::Impl::ApplyOptions(const TokenizerOptions& options) {
  max_length = options.max_length > 0 ? options.max_length
                                      : (json_truncation ? json_truncation->max_length : 0);
  switch (options.truncation) {
    case TruncationMode::kFromTokenizer:
      truncate = json_truncation.has_value();
      break;
    case TruncationMode::kTruncate:
      truncate = true;
      break;
    case TruncationMode::kReject:
      truncate = false;
      break;
  }
  if (json_truncation) {
    strategy = json_truncation->strategy;
    direction = json_truncation->direction;
  }
}

// --- Encoding
// -------------------------------------------------------------------------------------

absl::Status Tokenizer::Impl::EncodeSequence(absl::string_view text, absl::string_view name,
                                             std::vector<int32_t>* ids) const {
  if (size_t bad = unicode::FindInvalidUtf8(text); bad != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%sinvalid UTF-8 at byte offset %d (byte 0x%02x starts no well-formed sequence)", name, bad,
        static_cast<unsigned char>(text[bad])));
  }
  Scratch scratch;
  // Added tokens split the raw text first; the pieces between them are tokenized on their own.
  size_t segment_start = 0;
  if (!added_tokens.empty()) {
    for (size_t i = 0; i < text.size(); ++i) {
      if (!added_first_byte[static_cast<unsigned char>(text[i])]) {
        continue;
      }
      for (const AddedToken& token : added_tokens) {
        if (text.compare(i, token.content.size(), token.content) == 0) {
          EncodeSegment(text.substr(segment_start, i - segment_start), scratch, ids);
          ids->push_back(token.id);
          i += token.content.size() - 1;
          segment_start = i + 1;
          break;
        }
      }
    }
  }
  EncodeSegment(text.substr(segment_start), scratch, ids);
  return absl::OkStatus();
}

// The pipeline, one character at a time: normalize (clean, isolate Chinese characters, NFD and
// drop nonspacing marks, lowercase), pre-tokenize (whitespace ends a word, punctuation is a word
// of its own), and WordPiece each finished word. `tokenizers` runs these as passes over the whole
// string; all of them map one character at a time except NFD's canonical reordering, which the
// pending buffer does for each run of combining marks, so the result is the same.
void Tokenizer::Impl::EncodeSegment(absl::string_view segment, Scratch& scratch,
                                    std::vector<int32_t>* ids) const {
  const auto* s = reinterpret_cast<const unsigned char*>(segment.data());
  const size_t n = segment.size();
  for (size_t i = 0; i < n;) {
    char32_t c;
    if (s[i] < 0x80) {
      c = s[i];
      ++i;
    } else {
      i += unicode::DecodeUtf8(s + i, n - i, &c);  // validated by EncodeSequence
    }
    const uint8_t flags = char_flags[c];
    if (normalizer.clean_text) {
      if (flags & unicode::kRemovedByCleanText) {
        continue;
      }
      if (flags & unicode::kWhitespace) {
        c = ' ';
      }
    }
    if (normalizer.handle_chinese_chars && (flags & unicode::kChinese)) {
      EmitNormalized(' ', scratch, ids);
      EmitNormalized(c, scratch, ids);
      EmitNormalized(' ', scratch, ids);
      continue;
    }
    EmitNormalized(c, scratch, ids);
  }
  FlushPending(scratch, ids);
  EndWord(scratch, ids);
}

// After cleaning: accent stripping (NFD, then no Mn) and lowercasing.
void Tokenizer::Impl::EmitNormalized(char32_t c, Scratch& scratch,
                                     std::vector<int32_t>* ids) const {
  if (!normalizer.strip_accents) {
    EmitCased(c, scratch, ids);
    return;
  }
  char32_t decomposed[unicode::kMaxDecomposition];
  int count = 1;
  decomposed[0] = c;
  if (c >= 0x80 && (char_flags[c] & unicode::kDecomposes)) {
    count = unicode::Decompose(c, decomposed);
  }
  for (int k = 0; k < count; ++k) {
    const char32_t d = decomposed[k];
    if (d >= 0x80 && (char_flags[d] & unicode::kCombining)) {
      scratch.pending.push_back(d);  // reordered by class when the run ends
      continue;
    }
    FlushPending(scratch, ids);
    if (d >= 0x80 && (char_flags[d] & unicode::kNonspacingMark)) {
      continue;
    }
    EmitCased(d, scratch, ids);
  }
}

// The end of a run of combining marks: NFD's canonical ordering (a stable sort by combining
// class), then the marks that are not Mn go on.
void Tokenizer::Impl::FlushPending(Scratch& scratch, std::vector<int32_t>* ids) const {
  if (scratch.pending.empty()) {
    return;
  }
  auto& pending = scratch.pending;
  if (pending.size() > 1) {
    std::stable_sort(pending.begin(), pending.end(), [](char32_t a, char32_t b) {
      return unicode::CombiningClass(a) < unicode::CombiningClass(b);
    });
  }
  for (char32_t mark : pending) {
    if (!(char_flags[mark] & unicode::kNonspacingMark)) {
      EmitCased(mark, scratch, ids);
    }
  }
  pending.clear();
}

void Tokenizer::Impl::EmitCased(char32_t c, Scratch& scratch, std::vector<int32_t>* ids) const {
  if (!normalizer.lowercase) {
    PreTokenize(c, scratch, ids);
    return;
  }
  if (c < 0x80) {
    PreTokenize((c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c, scratch, ids);
    return;
  }
  if (!(char_flags[c] & unicode::kChangesWhenLowercased)) {
    PreTokenize(c, scratch, ids);
    return;
  }
  char32_t lower[unicode::kMaxLowercase];
  const int count = unicode::ToLower(c, lower);
  for (int k = 0; k < count; ++k) {
    PreTokenize(lower[k], scratch, ids);
  }
}

void Tokenizer::Impl::PreTokenize(char32_t c, Scratch& scratch, std::vector<int32_t>* ids) const {
  if (bert_pre_tokenizer) {
    const uint8_t flags = char_flags[c];
    if (flags & unicode::kWhitespace) {
      EndWord(scratch, ids);
      return;
    }
    if (flags & unicode::kPunctuation) {
      EndWord(scratch, ids);
      unicode::AppendUtf8(c, &scratch.word);
      scratch.ends.push_back(static_cast<uint32_t>(scratch.word.size()));
      EndWord(scratch, ids);
      return;
    }
  }
  unicode::AppendUtf8(c, &scratch.word);
  scratch.ends.push_back(static_cast<uint32_t>(scratch.word.size()));
}

void Tokenizer::Impl::EndWord(Scratch& scratch, std::vector<int32_t>* ids) const {
  if (scratch.word.empty()) {
    return;
  }
  WordPiece(scratch, ids);
  scratch.word.clear();
  scratch.ends.clear();
}

// Greedy longest-match-first, as `tokenizers`' WordPiece: the longest vocabulary entry that
// starts the rest of the word (with the continuing prefix after the first piece); a word that
// cannot be covered, or is longer than max_input_chars_per_word characters, is one unknown token.
void Tokenizer::Impl::WordPiece(Scratch& scratch, std::vector<int32_t>* ids) const {
  const absl::string_view word = scratch.word;
  const std::vector<uint32_t>& ends = scratch.ends;
  if (ends.size() > max_input_chars_per_word) {
    ids->push_back(unk_id);
    return;
  }
  const size_t mark = ids->size();
  const size_t prefix = continuing_prefix.size();
  size_t start = 0;
  size_t first_char = 0;  // index in `ends` of the first character after `start`
  while (start < word.size()) {
    absl::string_view candidate_base;
    size_t extra = 0;
    if (start == 0) {
      candidate_base = word;
    } else {
      scratch.piece.assign(continuing_prefix);
      scratch.piece.append(word.data() + start, word.size() - start);
      candidate_base = scratch.piece;
      extra = prefix;
    }
    int32_t found = -1;
    size_t k = ends.size();
    while (k > first_char) {
      --k;
      const size_t length = extra + (ends[k] - start);
      if (length > max_token_bytes) {
        continue;
      }
      found = Lookup(candidate_base.substr(0, length));
      if (found >= 0) {
        break;
      }
    }
    if (found < 0) {
      ids->resize(mark);
      ids->push_back(unk_id);
      return;
    }
    ids->push_back(found);
    start = ends[k];
    first_char = k + 1;
  }
}

// Truncation (`tokenizers`' truncate_encodings, with the template's special tokens taken off
// the limit first) and the post-processing template.
absl::StatusOr<Encoding> Tokenizer::Impl::Finish(std::vector<int32_t> a,
                                                 std::vector<int32_t>* b) const {
  const bool is_pair = b != nullptr;
  const int added = is_pair ? added_pair : added_single;
  const size_t total = a.size() + (is_pair ? b->size() : 0) + added;
  if (max_length > 0 && total > static_cast<size_t>(max_length)) {
    if (!truncate) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the text is %d tokens long, more than the limit of %d (truncation is off)", total,
          max_length));
    }
  }
  // `tokenizers` truncates to max_length minus the template's special tokens; when that is
  // negative its unsigned subtraction wraps around and nothing is truncated. Same here.
  if (truncate && max_length >= added && total > static_cast<size_t>(max_length)) {
    const size_t limit = static_cast<size_t>(max_length - added);
    auto cut = [&](std::vector<int32_t>& ids, size_t keep) {
      if (ids.size() <= keep) {
        return;
      }
      if (direction == Direction::kRight) {
        ids.resize(keep);
      } else {
        ids.erase(ids.begin(), ids.end() - keep);
      }
    };
    if (limit == 0) {
      cut(a, 0);
      if (is_pair) {
        cut(*b, 0);
      }
    } else if (!is_pair) {
      if (strategy == Strategy::kOnlySecond) {
        return absl::InvalidArgumentError("Truncation error: Second sequence not provided");
      }
      cut(a, limit);
    } else if (strategy == Strategy::kLongestFirst) {
      size_t n1 = a.size();
      size_t n2 = b->size();
      const bool swap = n1 > n2;  // make n1 the shorter
      if (swap) {
        std::swap(n1, n2);
      }
      n2 = n1 > limit ? n1 : std::max(n1, limit - n1);
      if (n1 + n2 > limit) {
        n1 = limit / 2;
        n2 = n1 + limit % 2;
      }
      if (swap) {
        std::swap(n1, n2);
      }
      cut(a, n1);
      cut(*b, n2);
    } else {
      std::vector<int32_t>& target = strategy == Strategy::kOnlyFirst ? a : *b;
      const size_t to_remove = a.size() + b->size() - limit;
      if (target.size() <= to_remove) {
        return absl::InvalidArgumentError(
            "Truncation error: Sequence to truncate too short to respect the provided max_length");
      }
      cut(target, target.size() - to_remove);
    }
  }
  Encoding encoding;
  const std::vector<TemplateItem>& items = is_pair ? pair_template : single_template;
  const size_t length = a.size() + (is_pair ? b->size() : 0) + added;
  encoding.ids.reserve(length);
  encoding.type_ids.reserve(length);
  if (items.empty()) {  // no post-processor: the sequences as they are
    encoding.ids = std::move(a);
    encoding.type_ids.assign(encoding.ids.size(), 0);
    if (is_pair) {
      encoding.ids.insert(encoding.ids.end(), b->begin(), b->end());
      encoding.type_ids.resize(encoding.ids.size(), 1);
    }
  }
  for (const TemplateItem& item : items) {
    const std::vector<int32_t>& source = item.sequence < 0 ? item.ids : item.sequence == 0 ? a : *b;
    encoding.ids.insert(encoding.ids.end(), source.begin(), source.end());
    encoding.type_ids.resize(encoding.ids.size(), item.type_id);
  }
  encoding.attention_mask.assign(encoding.ids.size(), 1);
  return encoding;
}

// --- Loading
// --------------------------------------------------------------------------------------

namespace {

absl::Status ParseNormalizer(const Json& json, NormalizerConfig* out, absl::string_view source) {
  if (json.is_null()) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::string type, ComponentType(json, "the normalizer", source));
  if (type != "BertNormalizer") {
    return Invalid(source, absl::StrCat("normalizer type '", type,
                                        "' is not supported (only BertNormalizer)"));
  }
  ASSIGN_OR_RETURN(out->clean_text, OptionalBool(json, "clean_text", true, source));
  ASSIGN_OR_RETURN(out->handle_chinese_chars,
                   OptionalBool(json, "handle_chinese_chars", true, source));
  ASSIGN_OR_RETURN(out->lowercase, OptionalBool(json, "lowercase", true, source));
  // `tokenizers`: strip_accents null means "as lowercase".
  ASSIGN_OR_RETURN(out->strip_accents, OptionalBool(json, "strip_accents", out->lowercase, source));
  return absl::OkStatus();
}

// The ids of a special token named in a post-processor.
absl::StatusOr<std::vector<int32_t>> SpecialIds(const Json& special_tokens, const std::string& name,
                                                absl::string_view source) {
  auto it = special_tokens.find(name);
  if (it == special_tokens.end() || !it->is_object() || !it->contains("ids") ||
      !(*it)["ids"].is_array()) {
    return Invalid(source, absl::StrCat("post_processor: special token '", name,
                                        "' is not in its special_tokens"));
  }
  std::vector<int32_t> ids;
  for (const Json& id : (*it)["ids"]) {
    if (!id.is_number_integer()) {
      return Invalid(
          source, absl::StrCat("post_processor: special token '", name, "' has a non-integer id"));
    }
    ids.push_back(id.get<int32_t>());
  }
  return ids;
}

absl::StatusOr<std::vector<TemplateItem>> ParseTemplate(const Json& list,
                                                        const Json& special_tokens,
                                                        absl::string_view which,
                                                        absl::string_view source) {
  if (!list.is_array()) {
    return Invalid(source, absl::StrCat("post_processor: '", which, "' is not a list"));
  }
  std::vector<TemplateItem> items;
  for (const Json& piece : list) {
    TemplateItem item;
    if (piece.is_object() && piece.contains("SpecialToken")) {
      const Json& special = piece["SpecialToken"];
      if (!special.is_object() || !special.contains("id") || !special["id"].is_string()) {
        return Invalid(source,
                       absl::StrCat("post_processor: malformed SpecialToken in '", which, "'"));
      }
      ASSIGN_OR_RETURN(item.ids,
                       SpecialIds(special_tokens, special["id"].get<std::string>(), source));
      ASSIGN_OR_RETURN(int64_t type_id, OptionalInt(special, "type_id", 0, source));
      item.type_id = static_cast<int32_t>(type_id);
    } else if (piece.is_object() && piece.contains("Sequence")) {
      const Json& sequence = piece["Sequence"];
      ASSIGN_OR_RETURN(std::string id, OptionalString(sequence, "id", "A", source));
      if (id != "A" && id != "B") {
        return Invalid(source, absl::StrCat("post_processor: sequence '", id, "' (A or B)"));
      }
      item.sequence = id == "A" ? 0 : 1;
      ASSIGN_OR_RETURN(int64_t type_id, OptionalInt(sequence, "type_id", 0, source));
      item.type_id = static_cast<int32_t>(type_id);
    } else {
      return Invalid(source, absl::StrCat("post_processor: unknown piece in '", which, "'"));
    }
    items.push_back(std::move(item));
  }
  return items;
}

int CountSpecial(const std::vector<TemplateItem>& items) {
  int count = 0;
  for (const TemplateItem& item : items) {
    if (item.sequence < 0) {
      count += static_cast<int>(item.ids.size());
    }
  }
  return count;
}

// BertProcessing's ["[CLS]", 101].
absl::StatusOr<std::vector<int32_t>> BertSpecial(const Json& json, const char* key,
                                                 absl::string_view source) {
  auto it = json.find(key);
  if (it == json.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) {
    return Invalid(source,
                   absl::StrCat("post_processor: BertProcessing '", key, "' is not [token, id]"));
  }
  return std::vector<int32_t>{(*it)[1].get<int32_t>()};
}

void SetBertTemplates(std::vector<int32_t> cls, std::vector<int32_t> sep,
                      std::vector<TemplateItem>* single, std::vector<TemplateItem>* pair) {
  *single = {{-1, cls, 0}, {0, {}, 0}, {-1, sep, 0}};
  *pair = {{-1, cls, 0}, {0, {}, 0}, {-1, sep, 0}, {1, {}, 1}, {-1, sep, 1}};
}

absl::Status ParseTruncation(const Json& json, std::optional<TruncationConfig>* out,
                             absl::string_view source) {
  if (json.is_null()) {
    return absl::OkStatus();
  }
  if (!json.is_object()) {
    return Invalid(source, "'truncation' is not an object");
  }
  TruncationConfig config;
  ASSIGN_OR_RETURN(int64_t max_length, OptionalInt(json, "max_length", 512, source));
  if (max_length < 0 || max_length > (1 << 30)) {
    return Invalid(source, absl::StrCat("truncation max_length ", max_length, " is out of range"));
  }
  config.max_length = static_cast<int>(max_length);
  ASSIGN_OR_RETURN(std::string strategy, OptionalString(json, "strategy", "LongestFirst", source));
  if (strategy == "LongestFirst") {
    config.strategy = Strategy::kLongestFirst;
  } else if (strategy == "OnlyFirst") {
    config.strategy = Strategy::kOnlyFirst;
  } else if (strategy == "OnlySecond") {
    config.strategy = Strategy::kOnlySecond;
  } else {
    return Invalid(source, absl::StrCat("truncation strategy '", strategy, "' is not known"));
  }
  ASSIGN_OR_RETURN(std::string direction, OptionalString(json, "direction", "Right", source));
  if (direction == "Right") {
    config.direction = Direction::kRight;
  } else if (direction == "Left") {
    config.direction = Direction::kLeft;
  } else {
    return Invalid(source, absl::StrCat("truncation direction '", direction, "' is not known"));
  }
  *out = config;
  return absl::OkStatus();
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(absl::string_view text,
                                                               const TokenizerOptions& options,
                                                               absl::string_view source) {
  ASSIGN_OR_RETURN(Json json, ParseJson(text, source));
  auto impl = std::make_unique<Impl>();

  // The model first: the rest refers to its vocabulary.
  if (!json.contains("model")) {
    return Invalid(source, "no \"model\"");
  }
  const Json& model = json["model"];
  ASSIGN_OR_RETURN(std::string model_type, ComponentType(model, "the model", source));
  if (model_type != "WordPiece") {
    return Invalid(source,
                   absl::StrCat("model type '", model_type, "' is not supported (only WordPiece)"));
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return Invalid(source, "WordPiece model has no \"vocab\" object");
  }
  std::vector<std::pair<std::string, int32_t>> entries;
  entries.reserve(model["vocab"].size());
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer()) {
      return Invalid(source, absl::StrCat("vocabulary entry '", token, "' has no integer id"));
    }
    entries.emplace_back(token, id.get<int32_t>());
  }
  if (entries.empty()) {
    return Invalid(source, "WordPiece vocabulary is empty");
  }
  RETURN_IF_ERROR(impl->AddVocab(std::move(entries), source));
  ASSIGN_OR_RETURN(std::string unk, OptionalString(model, "unk_token", "[UNK]", source));
  impl->unk_id = impl->Lookup(unk);
  if (impl->unk_id < 0) {
    return Invalid(source,
                   absl::StrCat("WordPiece unk_token '", unk, "' is not in the vocabulary"));
  }
  ASSIGN_OR_RETURN(impl->continuing_prefix,
                   OptionalString(model, "continuing_subword_prefix", "##", source));
  ASSIGN_OR_RETURN(int64_t max_chars, OptionalInt(model, "max_input_chars_per_word", 100, source));
  if (max_chars < 0) {
    return Invalid(source, "WordPiece max_input_chars_per_word is negative");
  }
  impl->max_input_chars_per_word = static_cast<size_t>(max_chars);

  RETURN_IF_ERROR(ParseNormalizer(json.value("normalizer", Json()), &impl->normalizer, source));

  const Json pre_tokenizer = json.value("pre_tokenizer", Json());
  if (!pre_tokenizer.is_null()) {
    ASSIGN_OR_RETURN(std::string type, ComponentType(pre_tokenizer, "the pre_tokenizer", source));
    if (type != "BertPreTokenizer") {
      return Invalid(source, absl::StrCat("pre_tokenizer type '", type,
                                          "' is not supported (only BertPreTokenizer)"));
    }
    impl->bert_pre_tokenizer = true;
  }

  const Json post = json.value("post_processor", Json());
  if (!post.is_null()) {
    ASSIGN_OR_RETURN(std::string type, ComponentType(post, "the post_processor", source));
    if (type == "TemplateProcessing") {
      const Json special = post.value("special_tokens", Json::object());
      ASSIGN_OR_RETURN(impl->single_template,
                       ParseTemplate(post.value("single", Json()), special, "single", source));
      ASSIGN_OR_RETURN(impl->pair_template,
                       ParseTemplate(post.value("pair", Json()), special, "pair", source));
    } else if (type == "BertProcessing") {
      ASSIGN_OR_RETURN(std::vector<int32_t> cls, BertSpecial(post, "cls", source));
      ASSIGN_OR_RETURN(std::vector<int32_t> sep, BertSpecial(post, "sep", source));
      SetBertTemplates(std::move(cls), std::move(sep), &impl->single_template,
                       &impl->pair_template);
    } else {
      return Invalid(source, absl::StrCat("post_processor type '", type,
                                          "' is not supported (TemplateProcessing or "
                                          "BertProcessing)"));
    }
    impl->added_single = CountSpecial(impl->single_template);
    impl->added_pair = CountSpecial(impl->pair_template);
  }

  // "decoder" and "padding" are not ours: decoding is never needed, and sequences are packed.
  RETURN_IF_ERROR(impl->SetAddedTokens(json.value("added_tokens", Json()), source));
  RETURN_IF_ERROR(
      ParseTruncation(json.value("truncation", Json()), &impl->json_truncation, source));
  impl->ApplyOptions(options);
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadJson(const std::string& path,
                                                               const TokenizerOptions& options) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return FromJson(text, options, path);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromVocab(absl::string_view vocab_txt,
                                                                absl::string_view config_json,
                                                                const TokenizerOptions& options) {
  constexpr absl::string_view kSource = "vocab.txt";
  Json config = Json::object();
  if (!config_json.empty()) {
    ASSIGN_OR_RETURN(config, ParseJson(config_json, "tokenizer_config.json"));
  }
  auto impl = std::make_unique<Impl>();
  std::vector<std::pair<std::string, int32_t>> entries;
  int32_t next_id = 0;
  // One token a line, as transformers' load_vocab reads it: the line without its line break.
  for (absl::string_view line : absl::StrSplit(vocab_txt, '\n')) {
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    entries.emplace_back(std::string(line), next_id++);
  }
  if (!entries.empty() && entries.back().first.empty()) {
    entries.pop_back();  // the final line break
  }
  if (entries.empty()) {
    return Invalid(kSource, "the vocabulary is empty");
  }
  // The ids are the line numbers: the final line break is no token (vocab_size counted it).
  const int32_t lines = static_cast<int32_t>(entries.size());
  // A repeated line keeps its last id, as transformers' dict does; its first id is a hole.
  std::vector<std::pair<std::string, int32_t>> unique;
  absl::flat_hash_map<std::string, size_t> seen;
  for (auto& entry : entries) {
    auto [it, inserted] = seen.emplace(entry.first, unique.size());
    if (inserted) {
      unique.push_back(std::move(entry));
    } else {
      unique[it->second].second = entry.second;
    }
  }
  RETURN_IF_ERROR(impl->AddVocab(std::move(unique), kSource));
  impl->vocab_size = lines;

  constexpr absl::string_view kConfig = "tokenizer_config.json";
  ASSIGN_OR_RETURN(bool lowercase, OptionalBool(config, "do_lower_case", true, kConfig));
  ASSIGN_OR_RETURN(bool chinese, OptionalBool(config, "tokenize_chinese_chars", true, kConfig));
  ASSIGN_OR_RETURN(bool strip, OptionalBool(config, "strip_accents", lowercase, kConfig));
  impl->normalizer = {.clean_text = true,
                      .handle_chinese_chars = chinese,
                      .strip_accents = strip,
                      .lowercase = lowercase};
  impl->bert_pre_tokenizer = true;

  auto special = [&](const char* key, const char* fallback) -> absl::StatusOr<int32_t> {
    ASSIGN_OR_RETURN(std::string token, OptionalString(config, key, fallback, kConfig));
    const int32_t id = impl->Lookup(token);
    if (id < 0) {
      return Invalid(kSource, absl::StrCat(key, " '", token, "' is not in the vocabulary"));
    }
    return id;
  };
  ASSIGN_OR_RETURN(impl->unk_id, special("unk_token", "[UNK]"));
  ASSIGN_OR_RETURN(int32_t cls, special("cls_token", "[CLS]"));
  ASSIGN_OR_RETURN(int32_t sep, special("sep_token", "[SEP]"));
  SetBertTemplates({cls}, {sep}, &impl->single_template, &impl->pair_template);
  impl->added_single = 2;
  impl->added_pair = 3;
  // BertTokenizerFast registers its special tokens as added tokens (matched in the raw text).
  Json added = Json::array();
  for (const auto& [key, fallback] :
       std::vector<std::pair<const char*, const char*>>{{"pad_token", "[PAD]"},
                                                        {"unk_token", "[UNK]"},
                                                        {"cls_token", "[CLS]"},
                                                        {"sep_token", "[SEP]"},
                                                        {"mask_token", "[MASK]"}}) {
    ASSIGN_OR_RETURN(std::string token, OptionalString(config, key, fallback, kConfig));
    const int32_t id = impl->Lookup(token);
    if (id >= 0) {
      added.push_back({{"content", token}, {"id", id}});
    }
  }
  RETURN_IF_ERROR(impl->SetAddedTokens(added, kSource));
  impl->ApplyOptions(options);
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadFolder(const std::string& dir,
                                                                 const TokenizerOptions& options) {
  const std::string json_path = dir + "/tokenizer.json";
  if (FileExists(json_path)) {
    return LoadJson(json_path, options);
  }
  const std::string vocab_path = dir + "/vocab.txt";
  if (!FileExists(vocab_path)) {
    return absl::NotFoundError(
        absl::StrCat("'", dir, "' has neither tokenizer.json nor vocab.txt"));
  }
  ASSIGN_OR_RETURN(std::string vocab, ReadFile(vocab_path));
  std::string config;
  const std::string config_path = dir + "/tokenizer_config.json";
  if (FileExists(config_path)) {
    ASSIGN_OR_RETURN(config, ReadFile(config_path));
  }
  return FromVocab(vocab, config, options);
}

absl::StatusOr<Encoding> Tokenizer::Encode(absl::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4 + 8);
  RETURN_IF_ERROR(impl_->EncodeSequence(text, "", &ids));
  return impl_->Finish(std::move(ids), nullptr);
}

absl::StatusOr<Encoding> Tokenizer::EncodePair(absl::string_view first,
                                               absl::string_view second) const {
  std::vector<int32_t> a;
  std::vector<int32_t> b;
  RETURN_IF_ERROR(impl_->EncodeSequence(first, "first text: ", &a));
  RETURN_IF_ERROR(impl_->EncodeSequence(second, "second text: ", &b));
  return impl_->Finish(std::move(a), &b);
}

int Tokenizer::vocab_size() const { return impl_->vocab_size; }
int32_t Tokenizer::TokenToId(absl::string_view token) const {
  const int32_t id = impl_->Lookup(token);
  if (id >= 0) {
    return id;
  }
  for (const AddedToken& added : impl_->added_tokens) {
    if (added.content == token) {
      return added.id;
    }
  }
  return -1;
}
int Tokenizer::max_length() const { return impl_->max_length; }
bool Tokenizer::truncates() const { return impl_->truncate; }

absl::StatusOr<int> ReadMaxSequenceLength(const std::string& dir) {
  struct Source {
    const char* file;
    std::vector<const char*> path;  // nested keys
  };
  const Source sources[] = {
      {"sentence_bert_config.json", {"max_seq_length"}},
      {"tokenizer_config.json", {"model_max_length"}},
      {"tokenizer.json", {"truncation", "max_length"}},
      {"config.json", {"max_position_embeddings"}},
  };
  for (const Source& source : sources) {
    const std::string path = dir + "/" + source.file;
    if (!FileExists(path)) {
      continue;
    }
    ASSIGN_OR_RETURN(std::string text, ReadFile(path));
    ASSIGN_OR_RETURN(Json json, ParseJson(text, path));
    const Json* value = &json;
    for (const char* key : source.path) {
      if (!value->is_object() || !value->contains(key)) {
        value = nullptr;
        break;
      }
      value = &(*value)[key];
    }
    if (value == nullptr || value->is_null()) {
      continue;
    }
    if (!value->is_number()) {
      return Invalid(path, absl::StrCat("'", source.path.back(), "' is not a number"));
    }
    const double length = value->get<double>();
    // transformers writes int(1e30) for "no limit" when a tokenizer has none.
    if (length >= 1e9) {
      continue;
    }
    if (length < 1) {
      return Invalid(path, absl::StrCat("'", source.path.back(), "' is not positive"));
    }
    return static_cast<int>(length);
  }
  return absl::NotFoundError(absl::StrCat("'", dir, "' states no maximum sequence length"));
}

}  // namespace sluice::text
