#include "text/pipeline.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "common/status_macros.h"
#include "text/unicode.h"

namespace sluice::text {
namespace {

// Rust regex's \w (what single_word looks at): Alphabetic, marks, decimal digits, connector
// punctuation, Join_Control.
bool IsWordChar(char32_t c) {
  const UChar32 u = static_cast<UChar32>(c);
  return u_hasBinaryProperty(u, UCHAR_ALPHABETIC) ||
         (U_GET_GC_MASK(u) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) ||
         u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL);
}

bool IsSpace(char32_t c) { return unicode::CharFlags(c) & unicode::kWhitespace; }

// The character that ends at `end` (> 0) in valid UTF-8 `text`, and where it starts.
char32_t CharBefore(absl::string_view text, size_t end, size_t* start) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) {
    --i;
  }
  char32_t c;
  unicode::DecodeUtf8(reinterpret_cast<const unsigned char*>(text.data()) + i, end - i, &c);
  *start = i;
  return c;
}

char32_t CharAt(absl::string_view text, size_t at, size_t* length) {
  char32_t c;
  *length = unicode::DecodeUtf8(reinterpret_cast<const unsigned char*>(text.data()) + at,
                                text.size() - at, &c);
  return c;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Pipeline>> Pipeline::Parse(const Json& json,
                                                          absl::string_view source,
                                                          ModelTables& tables) {
  const JsonPath root{source, ""};
  auto pipeline = std::unique_ptr<Pipeline>(new Pipeline());
  auto model = json.find("model");
  if (model == json.end() || model->is_null()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no \"model\""));
  }
  ASSIGN_OR_RETURN(pipeline->model_, ParseModel(*model, root.Child("model"), tables));
  ASSIGN_OR_RETURN(pipeline->normalizer_,
                   ParseNormalizer(json.value("normalizer", Json()), root.Child("normalizer")));
  ASSIGN_OR_RETURN(pipeline->pre_tokenizer_, ParsePreTokenizer(json.value("pre_tokenizer", Json()),
                                                               root.Child("pre_tokenizer")));
  pipeline->vocab_size_ = pipeline->model_->id_limit();

  const Json added = json.value("added_tokens", Json());
  const JsonPath added_at = root.Child("added_tokens");
  if (!added.is_null() && !added.is_array()) {
    return added_at.Error("is not a list");
  }
  // Ids as `tokenizers` gives them when it loads the file: the model's id if the content is in
  // its vocabulary, else the next free id after the model's vocabulary (the file's "id" only
  // draws a warning there when it differs; real files agree).
  absl::flat_hash_map<std::string, int32_t> assigned;
  int32_t next_id = pipeline->model_->size();
  pipeline->added_.reserve(added.is_array() ? added.size() : 0);
  for (size_t i = 0; added.is_array() && i < added.size(); ++i) {
    const Json& entry = added[i];
    const JsonPath at = added_at.Index(i);
    if (!entry.is_object()) {
      return at.Error("is not an object");
    }
    AddedToken token;
    ASSIGN_OR_RETURN(token.content, JsonString(entry, "content", "", at));
    if (token.content.empty()) {
      continue;  // `tokenizers` ignores empty tokens
    }
    if (unicode::FindInvalidUtf8(token.content) != absl::string_view::npos) {
      return at.Error("content is not valid UTF-8");
    }
    ASSIGN_OR_RETURN(bool special, JsonBool(entry, "special", false, at));
    ASSIGN_OR_RETURN(token.single_word, JsonBool(entry, "single_word", false, at));
    ASSIGN_OR_RETURN(token.lstrip, JsonBool(entry, "lstrip", false, at));
    ASSIGN_OR_RETURN(token.rstrip, JsonBool(entry, "rstrip", false, at));
    ASSIGN_OR_RETURN(token.normalized, JsonBool(entry, "normalized", !special, at));
    if (auto it = assigned.find(token.content); it != assigned.end()) {
      token.id = it->second;
    } else if (int32_t id = pipeline->model_->TokenToId(token.content); id >= 0) {
      token.id = id;
    } else {
      token.id = next_id++;
    }
    assigned[token.content] = token.id;
    token.pattern = token.content;
    if (token.normalized && pipeline->normalizer_ != nullptr) {
      pipeline->normalizer_->Normalize(token.pattern);
    }
    pipeline->vocab_size_ = std::max(pipeline->vocab_size_, token.id + 1);
    pipeline->added_.push_back(std::move(token));
  }
  // `tokenizers` keeps one entry per content (the last one's options win).
  absl::flat_hash_map<std::string, size_t> last;
  for (size_t i = 0; i < pipeline->added_.size(); ++i) {
    last[pipeline->added_[i].content] = i;
  }
  for (size_t i = 0; i < pipeline->added_.size(); ++i) {
    const AddedToken& token = pipeline->added_[i];
    if (last[token.content] != i || token.pattern.empty()) {
      continue;
    }
    MatchingSet& set = token.normalized ? pipeline->normalized_set_ : pipeline->raw_set_;
    set.tokens.push_back(&token);
    set.first_byte[static_cast<unsigned char>(token.pattern[0])] = true;
  }
  for (MatchingSet* set : {&pipeline->raw_set_, &pipeline->normalized_set_}) {
    std::stable_sort(set->tokens.begin(), set->tokens.end(),
                     [](const AddedToken* a, const AddedToken* b) {
                       return a->pattern.size() > b->pattern.size();
                     });
  }
  return pipeline;
}

int32_t Pipeline::TokenToId(absl::string_view token) const {
  for (const AddedToken& added : added_) {
    if (added.content == token) {
      return added.id;
    }
  }
  return model_->TokenToId(token);
}

// `tokenizers`' AddedVocabulary::find_matches: leftmost-longest matches, each checked for
// single_word (a discarded match is still consumed, as the Aho-Corasick iterator moves past it)
// and widened over neighbouring whitespace for lstrip / rstrip.
void Pipeline::FindAddedTokens(absl::string_view text, const MatchingSet& set,
                               std::vector<Split>* splits) const {
  splits->clear();
  size_t done = 0;  // the end of the last split
  for (size_t i = 0; i < text.size() && !set.tokens.empty();) {
    const AddedToken* found = nullptr;
    if (set.first_byte[static_cast<unsigned char>(text[i])]) {
      for (const AddedToken* token : set.tokens) {
        if (text.compare(i, token->pattern.size(), token->pattern) == 0) {
          found = token;
          break;
        }
      }
    }
    if (found == nullptr) {
      ++i;
      continue;
    }
    size_t start = i;
    size_t stop = i + found->pattern.size();
    i = stop;
    if (found->single_word) {
      size_t unused;
      const bool start_ok = start == 0 || !IsWordChar(CharBefore(text, start, &unused));
      const bool stop_ok = stop == text.size() || !IsWordChar(CharAt(text, stop, &unused));
      if (!start_ok || !stop_ok) {
        continue;
      }
    }
    if (found->lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        size_t char_start;
        if (!IsSpace(CharBefore(text, new_start, &char_start))) {
          break;
        }
        new_start = char_start;
      }
      start = std::max(new_start, done);
    }
    if (found->rstrip) {
      while (stop < text.size()) {
        size_t length;
        if (!IsSpace(CharAt(text, stop, &length))) {
          break;
        }
        stop += length;
      }
      i = stop;
    }
    if (done < start) {
      splits->push_back({done, start, -1});
    }
    splits->push_back({start, stop, found->id});
    done = stop;
  }
  if (done < text.size()) {
    splits->push_back({done, text.size(), -1});
  }
}

absl::Status Pipeline::EncodePiece(std::string text, bool first, std::vector<int32_t>* ids) const {
  std::vector<Piece> pieces;
  pieces.push_back({std::move(text), first});
  if (pre_tokenizer_ != nullptr) {
    pre_tokenizer_->PreTokenize(pieces);
  }
  for (const Piece& piece : pieces) {
    if (!piece.text.empty()) {
      RETURN_IF_ERROR(model_->Tokenize(piece.text, ids));
    }
  }
  return absl::OkStatus();
}

std::string Pipeline::AddedTokenContent(int32_t id) const {
  for (const AddedToken& token : added_) {
    if (token.id == id) {
      return token.content;
    }
  }
  return std::string();
}

absl::Status Pipeline::EncodeSequence(absl::string_view text, std::vector<int32_t>* ids,
                                      std::vector<TokenOffsets>* offsets) const {
  std::vector<Split> raw;
  std::vector<Split> normalized_splits;
  FindAddedTokens(text, raw_set_, &raw);
  for (const Split& split : raw) {
    const size_t before = ids->size();
    RETURN_IF_ERROR(EncodeSplit(text, split, &normalized_splits, ids));
    if (offsets == nullptr) {
      continue;
    }
    // An added token matched as its very content (no stripped whitespace) has exact offsets.
    if (split.id >= 0 &&
        text.substr(split.start, split.end - split.start) == AddedTokenContent(split.id)) {
      offsets->push_back({static_cast<int64_t>(split.start), static_cast<int64_t>(split.end)});
    } else {
      offsets->resize(offsets->size() + (ids->size() - before));
    }
  }
  return absl::OkStatus();
}

// One split of the raw text: an added token, or a stretch normalized and encoded.
absl::Status Pipeline::EncodeSplit(absl::string_view text, const Split& split,
                                   std::vector<Split>* normalized_splits,
                                   std::vector<int32_t>* ids) const {
  if (split.id >= 0) {
    ids->push_back(split.id);
    return absl::OkStatus();
  }
  std::string normalized(text.substr(split.start, split.end - split.start));
  if (normalizer_ != nullptr) {
    normalizer_->Normalize(normalized);
  }
  if (normalized.empty()) {
    return absl::OkStatus();
  }
  const bool first = split.start == 0;
  if (normalized_set_.tokens.empty()) {
    return EncodePiece(std::move(normalized), first, ids);
  }
  FindAddedTokens(normalized, normalized_set_, normalized_splits);
  for (const Split& inner : *normalized_splits) {
    if (inner.id >= 0) {
      ids->push_back(inner.id);
    } else {
      RETURN_IF_ERROR(EncodePiece(normalized.substr(inner.start, inner.end - inner.start),
                                  first && inner.start == 0, ids));
    }
  }
  return absl::OkStatus();
}

}  // namespace sluice::text
