#include "text/pre_tokenizers.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <utility>

#include "common/status_macros.h"
#include "text/regex.h"
#include "text/unicode.h"

namespace sluice::text {
namespace {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// A stretch of a piece's text and whether the pattern matched it; together they cover the text.
struct Span {
  size_t start;
  size_t end;
  bool match;
};

absl::StatusOr<Behavior> ParseBehavior(const Json& json, const char* key, Behavior fallback,
                                       const JsonPath& at) {
  ASSIGN_OR_RETURN(std::string name, JsonString(json, key, "", at));
  if (name.empty()) {
    return fallback;
  }
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  return at.Error(absl::StrCat("behavior '", name, "' is not known"));
}

// `tokenizers`' NormalizedString::split: applies `behavior` to the spans of `piece` and appends
// the non-empty results to `out`.
void SplitSpans(const Piece& piece, std::vector<Span>& spans, Behavior behavior,
                std::vector<Piece>& out) {
  std::vector<Span> kept;  // match = "remove it"
  kept.reserve(spans.size());
  switch (behavior) {
    case Behavior::kIsolated:
      for (const Span& s : spans) kept.push_back({s.start, s.end, false});
      break;
    case Behavior::kRemoved:
      kept = spans;
      break;
    case Behavior::kContiguous: {
      bool previous = false;
      for (const Span& s : spans) {
        if (s.match == previous && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.start, s.end, false});
        }
        previous = s.match;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      bool previous = false;
      for (const Span& s : spans) {
        if (s.match && !previous && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.start, s.end, false});
        }
        previous = s.match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !previous && !kept.empty()) {
          kept.back().start = it->start;
        } else {
          kept.push_back({it->start, it->end, false});
        }
        previous = it->match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
  }
  for (const Span& s : kept) {
    if (s.match || s.end == s.start) {
      continue;
    }
    out.push_back({piece.text.substr(s.start, s.end - s.start), piece.first && s.start == 0});
  }
}

// The spans of a regex's matches (and the gaps between them) in `text`.
void RegexSpans(const Regex& regex, absl::string_view text, bool invert, std::vector<Span>& spans) {
  spans.clear();
  size_t previous = 0;
  regex.FindAll(text, [&](size_t start, size_t end) {
    if (previous != start) {
      spans.push_back({previous, start, invert});
    }
    spans.push_back({start, end, !invert});
    previous = end;
  });
  if (previous != text.size()) {
    spans.push_back({previous, text.size(), invert});
  }
}

// The spans of a character predicate: each matching character alone, the runs between them.
template <typename Predicate>
void CharSpans(absl::string_view text, Predicate&& is_match, std::vector<Span>& spans) {
  spans.clear();
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t last = 0;
  for (size_t i = 0; i < text.size();) {
    char32_t c;
    const size_t n = s[i] < 0x80 ? (c = s[i], 1) : unicode::DecodeUtf8(s + i, text.size() - i, &c);
    if (is_match(c)) {
      if (last < i) {
        spans.push_back({last, i, false});
      }
      spans.push_back({i, i + n, true});
      last = i + n;
    }
    i += n;
  }
  if (last < text.size()) {
    spans.push_back({last, text.size(), false});
  }
}

bool IsWhitespace(char32_t c) { return unicode::CharFlags(c) & unicode::kWhitespace; }
bool IsPunctuation(char32_t c) { return unicode::CharFlags(c) & unicode::kPunctuation; }
bool IsNumeric(char32_t c) { return U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK; }

// Applies a per-piece function to every piece.
template <typename F>
void ForEachPiece(std::vector<Piece>& pieces, F&& f) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 2);
  std::vector<Span> spans;
  for (const Piece& piece : pieces) {
    f(piece, spans, out);
  }
  pieces = std::move(out);
}

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void PreTokenize(std::vector<Piece>& pieces) const override {
    for (const auto& part : parts_) {
      part->PreTokenize(pieces);
    }
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> regex, Behavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void PreTokenize(std::vector<Piece>& pieces) const override {
    ForEachPiece(pieces,
                 [&](const Piece& piece, std::vector<Span>& spans, std::vector<Piece>& out) {
                   RegexSpans(*regex_, piece.text, invert_, spans);
                   SplitSpans(piece, spans, behavior_, out);
                 });
  }

 private:
  std::unique_ptr<Regex> regex_;
  Behavior behavior_;
  bool invert_;
};

// A split on a character class (WhitespaceSplit, Punctuation, Digits, BertPreTokenizer).
template <bool (*kIsMatch)(char32_t)>
class CharSplitPreTokenizer : public PreTokenizer {
 public:
  explicit CharSplitPreTokenizer(Behavior behavior) : behavior_(behavior) {}
  void PreTokenize(std::vector<Piece>& pieces) const override {
    ForEachPiece(pieces,
                 [&](const Piece& piece, std::vector<Span>& spans, std::vector<Piece>& out) {
                   CharSpans(piece.text, kIsMatch, spans);
                   SplitSpans(piece, spans, behavior_, out);
                 });
  }

 private:
  Behavior behavior_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {
    for (int b = 0; b < 256; ++b) {
      std::string s;
      unicode::AppendUtf8(unicode::ByteToChar(static_cast<unsigned char>(b)), &s);
      mapped_[b] = s;
    }
  }
  void PreTokenize(std::vector<Piece>& pieces) const override {
    ForEachPiece(pieces, [&](const Piece& in, std::vector<Span>& spans, std::vector<Piece>& out) {
      Piece piece = in;
      if (add_prefix_space_ && !piece.text.empty() && piece.text[0] != ' ') {
        piece.text.insert(0, 1, ' ');
      }
      const size_t first = out.size();
      if (regex_ != nullptr) {
        RegexSpans(*regex_, piece.text, false, spans);
        SplitSpans(piece, spans, Behavior::kIsolated, out);
      } else if (!piece.text.empty()) {
        out.push_back(std::move(piece));
      }
      for (size_t i = first; i < out.size(); ++i) {
        std::string mapped;
        mapped.reserve(out[i].text.size() * 2);
        for (unsigned char b : out[i].text) {
          mapped += mapped_[b];
        }
        out[i].text = std::move(mapped);
      }
    });
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;  // null: use_regex false
  std::string mapped_[256];
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  enum class Prepend { kFirst, kAlways, kNever };
  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {
    char32_t c = 0;
    unicode::DecodeUtf8(reinterpret_cast<const unsigned char*>(replacement_.data()),
                        replacement_.size(), &c);
    replacement_char_ = c;
  }
  void PreTokenize(std::vector<Piece>& pieces) const override {
    ForEachPiece(pieces, [&](const Piece& in, std::vector<Span>& spans, std::vector<Piece>& out) {
      Piece piece;
      piece.first = in.first;
      piece.text.reserve(in.text.size() + 8);
      for (char c : in.text) {
        if (c == ' ') {
          piece.text += replacement_;
        } else {
          piece.text += c;
        }
      }
      const bool starts = piece.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!piece.text.empty() && !starts &&
          (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && piece.first))) {
        piece.text.insert(0, replacement_);
      }
      if (!split_) {
        if (!piece.text.empty()) {
          out.push_back(std::move(piece));
        }
        return;
      }
      const char32_t r = replacement_char_;
      CharSpans(
          piece.text, [r](char32_t c) { return c == r; }, spans);
      SplitSpans(piece, spans, Behavior::kMergedWithNext, out);
    });
  }

 private:
  std::string replacement_;
  char32_t replacement_char_;
  Prepend prepend_;
  bool split_;
};

// `tokenizers`' Whitespace: the matches of \w+|[^\w\s]+ are the pieces.
class WhitespacePreTokenizer : public PreTokenizer {
 public:
  explicit WhitespacePreTokenizer(std::unique_ptr<Regex> regex) : regex_(std::move(regex)) {}
  void PreTokenize(std::vector<Piece>& pieces) const override {
    ForEachPiece(pieces,
                 [&](const Piece& piece, std::vector<Span>& spans, std::vector<Piece>& out) {
                   RegexSpans(*regex_, piece.text, /*invert=*/true, spans);
                   SplitSpans(piece, spans, Behavior::kRemoved, out);
                 });
  }

 private:
  std::unique_ptr<Regex> regex_;
};

class BertPreTokenizer : public PreTokenizer {
 public:
  void PreTokenize(std::vector<Piece>& pieces) const override {
    whitespace_.PreTokenize(pieces);
    punctuation_.PreTokenize(pieces);
  }

 private:
  CharSplitPreTokenizer<IsWhitespace> whitespace_{Behavior::kRemoved};
  CharSplitPreTokenizer<IsPunctuation> punctuation_{Behavior::kIsolated};
};

constexpr absl::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const Json& json,
                                                                const JsonPath& at) {
  if (json.is_null()) {
    return nullptr;
  }
  ASSIGN_OR_RETURN(std::string type, JsonType(json, at));
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* list, JsonMember(json, "pretokenizers", at));
    if (!list->is_array()) {
      return at.Error("'pretokenizers' is not a list");
    }
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list->size(); ++i) {
      ASSIGN_OR_RETURN(auto part,
                       ParsePreTokenizer((*list)[i], at.Child("pretokenizers").Index(i)));
      if (part != nullptr) {
        parts.push_back(std::move(part));
      }
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  if (type == "ByteLevel") {
    ASSIGN_OR_RETURN(bool prefix, JsonBool(json, "add_prefix_space", true, at));
    ASSIGN_OR_RETURN(bool use_regex, JsonBool(json, "use_regex", true, at));
    std::unique_ptr<Regex> regex;
    if (use_regex) {
      ASSIGN_OR_RETURN(regex, Regex::Compile(kGpt2Pattern, false));
    }
    return std::make_unique<ByteLevelPreTokenizer>(prefix, std::move(regex));
  }
  if (type == "Split") {
    ASSIGN_OR_RETURN(const Json* pattern, JsonMember(json, "pattern", at));
    ASSIGN_OR_RETURN(auto regex, ParsePattern(*pattern, at.Child("pattern")));
    if (!json.contains("behavior")) {
      return at.Error("has no 'behavior'");
    }
    ASSIGN_OR_RETURN(Behavior behavior, ParseBehavior(json, "behavior", Behavior::kRemoved, at));
    ASSIGN_OR_RETURN(bool invert, JsonBool(json, "invert", false, at));
    return std::make_unique<SplitPreTokenizer>(std::move(regex), behavior, invert);
  }
  if (type == "Metaspace") {
    ASSIGN_OR_RETURN(std::string replacement, JsonString(json, "replacement", "\u2581", at));
    char32_t c;
    if (replacement.empty() ||
        unicode::DecodeUtf8(reinterpret_cast<const unsigned char*>(replacement.data()),
                            replacement.size(), &c) != static_cast<int>(replacement.size())) {
      return at.Error("'replacement' is not one character");
    }
    ASSIGN_OR_RETURN(std::string scheme, JsonString(json, "prepend_scheme", "always", at));
    MetaspacePreTokenizer::Prepend prepend;
    if (scheme == "always") {
      prepend = MetaspacePreTokenizer::Prepend::kAlways;
    } else if (scheme == "first") {
      prepend = MetaspacePreTokenizer::Prepend::kFirst;
    } else if (scheme == "never") {
      prepend = MetaspacePreTokenizer::Prepend::kNever;
    } else {
      return at.Error(absl::StrCat("prepend_scheme '", scheme, "' is not known"));
    }
    // The older form: add_prefix_space false means never (and must not contradict the scheme).
    auto legacy = json.find("add_prefix_space");
    if (legacy != json.end() && legacy->is_boolean() && !legacy->get<bool>()) {
      if (prepend != MetaspacePreTokenizer::Prepend::kNever) {
        return at.Error("add_prefix_space does not match declared prepend_scheme");
      }
    }
    ASSIGN_OR_RETURN(bool split, JsonBool(json, "split", true, at));
    return std::make_unique<MetaspacePreTokenizer>(replacement, prepend, split);
  }
  if (type == "Whitespace") {
    ASSIGN_OR_RETURN(auto regex, Regex::Compile(R"(\w+|[^\w\s]+)", false, Regex::Flavor::kRust));
    return std::make_unique<WhitespacePreTokenizer>(std::move(regex));
  }
  if (type == "WhitespaceSplit") {
    return std::make_unique<CharSplitPreTokenizer<IsWhitespace>>(Behavior::kRemoved);
  }
  if (type == "Punctuation") {
    ASSIGN_OR_RETURN(Behavior behavior, ParseBehavior(json, "behavior", Behavior::kIsolated, at));
    return std::make_unique<CharSplitPreTokenizer<IsPunctuation>>(behavior);
  }
  if (type == "Digits") {
    ASSIGN_OR_RETURN(bool individual, JsonBool(json, "individual_digits", false, at));
    return std::make_unique<CharSplitPreTokenizer<IsNumeric>>(individual ? Behavior::kIsolated
                                                                         : Behavior::kContiguous);
  }
  if (type == "BertPreTokenizer") {
    return std::make_unique<BertPreTokenizer>();
  }
  return Unsupported(type, at);
}

}  // namespace sluice::text
