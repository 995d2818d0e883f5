#include "text/normalizers.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/uniset.h>
#include <unicode/unistr.h>

#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "text/precompiled.h"
#include "text/regex.h"
#include "text/unicode.h"

namespace sluice::text {
namespace {

// Calls f(c) for each code point of valid UTF-8 `text`.
template <typename F>
void ForEachChar(absl::string_view text, F&& f) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    char32_t c;
    if (s[i] < 0x80) {
      c = s[i++];
    } else {
      i += unicode::DecodeUtf8(s + i, text.size() - i, &c);
    }
    f(c);
  }
}

bool IsAscii(absl::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      return false;
    }
  }
  return true;
}

// Unicode 16.0's new lowercase pairs: Rust's char::to_lowercase (`tokenizers`' Lowercase) has
// them, ICU 72 (Unicode 15.0) does not. 0: none.
char32_t Unicode16Lowercase(char32_t c) {
  switch (c) {
    case 0x1C89:
      return 0x1C8A;
    case 0xA7CB:
      return 0x0264;
    case 0xA7CC:
      return 0xA7CD;
    case 0xA7DA:
      return 0xA7DB;
    case 0xA7DC:
      return 0x019B;
    default:
      return c >= 0x10D50 && c <= 0x10D65 ? c + 0x20 : 0;
  }
}

// The characters Unicode 9.0 assigned. `tokenizers` normalizes (NFC ... NFKD, StripAccents)
// with unicode-normalization-alignments, whose tables are Unicode 9.0: to it, anything newer
// has no decomposition and is no mark. ICU's normalizers filtered to this set do the same
// (measured against `tokenizers` 0.22.1 on every code point).
const icu::UnicodeSet& Unicode9() {
  static const icu::UnicodeSet* set = [] {
    UErrorCode status = U_ZERO_ERROR;
    auto* s = new icu::UnicodeSet(icu::UnicodeString(u"[:age=9.0:]"), status);
    s->freeze();
    return s;
  }();
  return *set;
}

// A normalizer of ICU's, as of Unicode 9.0.
const icu::Normalizer2* AsOfUnicode9(const icu::Normalizer2* normalizer) {
  return new icu::FilteredNormalizer2(*normalizer, Unicode9());
}

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void Normalize(std::string& text) const override {
    for (const auto& part : parts_) {
      part->Normalize(text);
    }
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

// NFC / NFD / NFKC / NFKD through ICU (ASCII is left as it is by all four).
class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(const icu::Normalizer2* normalizer) : normalizer_(normalizer) {}
  void Normalize(std::string& text) const override {
    if (IsAscii(text)) {
      return;
    }
    UErrorCode status = U_ZERO_ERROR;
    const icu::UnicodeString in = icu::UnicodeString::fromUTF8(text);
    if (normalizer_->isNormalized(in, status) && U_SUCCESS(status)) {
      return;
    }
    status = U_ZERO_ERROR;
    const icu::UnicodeString out = normalizer_->normalize(in, status);
    if (U_SUCCESS(status)) {
      text.clear();
      out.toUTF8String(text);
    }
  }

 private:
  const icu::Normalizer2* normalizer_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void Normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    const uint8_t* flags = unicode::CharFlagTable();
    ForEachChar(text, [&](char32_t c) {
      if (c < 0x80) {
        out += static_cast<char>((c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c);
      } else if (const char32_t newer = Unicode16Lowercase(c); newer != 0) {
        unicode::AppendUtf8(newer, &out);
      } else if (!(flags[c] & unicode::kChangesWhenLowercased)) {
        unicode::AppendUtf8(c, &out);
      } else {
        char32_t lower[unicode::kMaxLowercase];
        const int n = unicode::ToLower(c, lower);
        for (int k = 0; k < n; ++k) {
          unicode::AppendUtf8(lower[k], &out);
        }
      }
    });
    text = std::move(out);
  }
};

// Removes leading / trailing White_Space.
class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string& text) const override {
    const uint8_t* flags = unicode::CharFlagTable();
    size_t begin = 0;
    size_t end = text.size();
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    if (left_) {
      while (begin < end) {
        char32_t c;
        const int n = unicode::DecodeUtf8(s + begin, end - begin, &c);
        if (!(flags[c] & unicode::kWhitespace)) {
          break;
        }
        begin += n;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (s[start] & 0xC0) == 0x80) {
          --start;
        }
        char32_t c;
        unicode::DecodeUtf8(s + start, end - start, &c);
        if (!(flags[c] & unicode::kWhitespace)) {
          break;
        }
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_;
  bool right_;
};

// Drops every mark (general category M), as unicode-normalization's is_combining_mark.
class StripAccentsNormalizer : public Normalizer {
 public:
  void Normalize(std::string& text) const override {
    if (IsAscii(text)) {
      return;
    }
    std::string out;
    out.reserve(text.size());
    ForEachChar(text, [&](char32_t c) {
      // Recategorised since Unicode 9.0: U+111C9 SHARADA SANDHI MARK was Po until 11.0;
      // U+1CF2, U+1CF3 VEDIC SIGN (ROTATED) ARDHAVISARGA were Mc until 10.0.
      const bool mark =
          c == 0x1CF2 || c == 0x1CF3 ||
          (c >= 0x80 && c != 0x111C9 && (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_M_MASK) &&
           Unicode9().contains(static_cast<UChar32>(c)));
      if (!mark) {
        unicode::AppendUtf8(c, &out);
      }
    });
    text = std::move(out);
  }
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> regex, std::string content)
      : regex_(std::move(regex)), content_(std::move(content)) {}
  void Normalize(std::string& text) const override {
    std::string out;
    size_t last = 0;
    bool matched = false;
    regex_->FindAll(text, [&](size_t start, size_t end) {
      out.append(text, last, start - last);
      out += content_;
      last = end;
      matched = true;
    });
    if (!matched) {
      return;
    }
    out.append(text, last, std::string::npos);
    text = std::move(out);
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void Normalize(std::string& text) const override {
    if (!text.empty()) {
      text.insert(0, prefix_);
    }
  }

 private:
  std::string prefix_;
};

class PrecompiledNormalizer : public Normalizer {
 public:
  explicit PrecompiledNormalizer(std::unique_ptr<PrecompiledCharsmap> map) : map_(std::move(map)) {}
  void Normalize(std::string& text) const override { map_->Normalize(text); }

 private:
  std::unique_ptr<PrecompiledCharsmap> map_;
};

// SentencePiece's "nmt" rules: drop some controls, map some separators to a space.
class NmtNormalizer : public Normalizer {
 public:
  void Normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    ForEachChar(text, [&](char32_t c) {
      if ((c >= 0x1 && c <= 0x8) || c == 0xB || (c >= 0xE && c <= 0x1F) || c == 0x7F || c == 0x8F ||
          c == 0x9F) {
        return;
      }
      if (c == 0x9 || c == 0xA || c == 0xC || c == 0xD || c == 0x1680 ||
          (c >= 0x200B && c <= 0x200F) || c == 0x2028 || c == 0x2029 || c == 0x2581 ||
          c == 0xFEFF || c == 0xFFFD) {
        c = ' ';
      }
      unicode::AppendUtf8(c, &out);
    });
    text = std::move(out);
  }
};

// GPT-2's byte-to-character map: printable Latin-1 bytes stand for themselves, the other 68
// bytes for U+0100 upwards, in byte order.
class ByteLevelNormalizer : public Normalizer {
 public:
  void Normalize(std::string& text) const override;
};

class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean, bool chinese, bool strip, bool lower)
      : clean_(clean), chinese_(chinese), strip_(strip), lower_(lower) {}
  void Normalize(std::string& text) const override {
    const uint8_t* flags = unicode::CharFlagTable();
    std::string out;
    out.reserve(text.size());
    ForEachChar(text, [&](char32_t c) {
      if (clean_) {
        if (flags[c] & unicode::kRemovedByCleanText) {
          return;
        }
        if (flags[c] & unicode::kWhitespace) {
          c = ' ';
        }
      }
      if (chinese_ && (flags[c] & unicode::kChinese)) {
        out += ' ';
        unicode::AppendUtf8(c, &out);
        out += ' ';
        return;
      }
      unicode::AppendUtf8(c, &out);
    });
    if (strip_) {
      nfd_.Normalize(out);
      std::string kept;
      kept.reserve(out.size());
      ForEachChar(out, [&](char32_t c) {
        if (!(flags[c] & unicode::kNonspacingMark)) {
          unicode::AppendUtf8(c, &kept);
        }
      });
      out = std::move(kept);
    }
    if (lower_) {
      lowercase_.Normalize(out);
    }
    text = std::move(out);
  }

 private:
  bool clean_, chinese_, strip_, lower_;
  UnicodeNormalizer nfd_{NfdInstance()};
  LowercaseNormalizer lowercase_;
  static const icu::Normalizer2* NfdInstance() {
    UErrorCode status = U_ZERO_ERROR;
    static const icu::Normalizer2* nfd = AsOfUnicode9(icu::Normalizer2::getNFDInstance(status));
    return nfd;
  }
};

}  // namespace

void ByteLevelNormalizer::Normalize(std::string& text) const {
  std::string out;
  out.reserve(text.size() * 2);
  for (unsigned char b : text) {
    unicode::AppendUtf8(unicode::ByteToChar(b), &out);
  }
  text = std::move(out);
}

absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const Json& json, const JsonPath& at) {
  if (json.is_null()) {
    return nullptr;
  }
  ASSIGN_OR_RETURN(std::string type, JsonType(json, at));
  UErrorCode status = U_ZERO_ERROR;
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* list, JsonMember(json, "normalizers", at));
    if (!list->is_array()) {
      return at.Error("'normalizers' is not a list");
    }
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list->size(); ++i) {
      ASSIGN_OR_RETURN(auto part, ParseNormalizer((*list)[i], at.Child("normalizers").Index(i)));
      if (part != nullptr) {
        parts.push_back(std::move(part));
      }
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  if (type == "NFC") {
    static const icu::Normalizer2* normalizer =
        AsOfUnicode9(icu::Normalizer2::getNFCInstance(status));
    return std::make_unique<UnicodeNormalizer>(normalizer);
  }
  if (type == "NFD") {
    static const icu::Normalizer2* normalizer =
        AsOfUnicode9(icu::Normalizer2::getNFDInstance(status));
    return std::make_unique<UnicodeNormalizer>(normalizer);
  }
  if (type == "NFKC") {
    static const icu::Normalizer2* normalizer =
        AsOfUnicode9(icu::Normalizer2::getNFKCInstance(status));
    return std::make_unique<UnicodeNormalizer>(normalizer);
  }
  if (type == "NFKD") {
    static const icu::Normalizer2* normalizer =
        AsOfUnicode9(icu::Normalizer2::getNFKDInstance(status));
    return std::make_unique<UnicodeNormalizer>(normalizer);
  }
  if (type == "Lowercase") {
    return std::make_unique<LowercaseNormalizer>();
  }
  if (type == "StripAccents") {
    return std::make_unique<StripAccentsNormalizer>();
  }
  if (type == "Nmt") {
    return std::make_unique<NmtNormalizer>();
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelNormalizer>();
  }
  if (type == "Strip") {
    ASSIGN_OR_RETURN(bool left, JsonBool(json, "strip_left", true, at));
    ASSIGN_OR_RETURN(bool right, JsonBool(json, "strip_right", true, at));
    return std::make_unique<StripNormalizer>(left, right);
  }
  if (type == "Prepend") {
    ASSIGN_OR_RETURN(const Json* prepend, JsonMember(json, "prepend", at));
    if (!prepend->is_string()) {
      return at.Error("'prepend' is not a string");
    }
    return std::make_unique<PrependNormalizer>(prepend->get<std::string>());
  }
  if (type == "Replace") {
    ASSIGN_OR_RETURN(const Json* pattern, JsonMember(json, "pattern", at));
    ASSIGN_OR_RETURN(const Json* content, JsonMember(json, "content", at));
    if (!content->is_string()) {
      return at.Error("'content' is not a string");
    }
    ASSIGN_OR_RETURN(auto regex, ParsePattern(*pattern, at.Child("pattern")));
    return std::make_unique<ReplaceNormalizer>(std::move(regex), content->get<std::string>());
  }
  if (type == "Precompiled") {
    ASSIGN_OR_RETURN(const Json* charsmap, JsonMember(json, "precompiled_charsmap", at));
    if (!charsmap->is_string()) {
      return at.Error("'precompiled_charsmap' is not a base64 string");
    }
    auto map = PrecompiledCharsmap::FromBase64(charsmap->get<std::string>());
    if (!map.ok()) {
      return at.Error(map.status().message());
    }
    return std::make_unique<PrecompiledNormalizer>(*std::move(map));
  }
  if (type == "BertNormalizer") {
    ASSIGN_OR_RETURN(bool clean, JsonBool(json, "clean_text", true, at));
    ASSIGN_OR_RETURN(bool chinese, JsonBool(json, "handle_chinese_chars", true, at));
    ASSIGN_OR_RETURN(bool lower, JsonBool(json, "lowercase", true, at));
    ASSIGN_OR_RETURN(bool strip, JsonBool(json, "strip_accents", lower, at));
    return std::make_unique<BertNormalizer>(clean, chinese, strip, lower);
  }
  return Unsupported(type, at);
}

}  // namespace sluice::text
