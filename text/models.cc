#include "text/models.h"

#include <algorithm>
#include <optional>
#include <queue>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "text/unicode.h"

namespace sluice::text {
namespace {

using Vocab = absl::flat_hash_map<std::string, int32_t>;

size_t CharLength(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

int32_t Find(const Vocab& vocab, absl::string_view token) {
  auto it = vocab.find(token);
  return it == vocab.end() ? -1 : it->second;
}

// "<0x41>"-style byte tokens (byte_fallback), -1 where the vocabulary lacks one.
void ByteTokens(const Vocab& vocab, int32_t (&ids)[256]) {
  for (int b = 0; b < 256; ++b) {
    ids[b] = Find(vocab, absl::StrFormat("<0x%02X>", b));
  }
}

// A {token: id} vocabulary object (collected by the parse: json_load.h).
absl::Status ParseVocabObject(const Json& json, ModelTables& tables, const JsonPath& at,
                              Vocab* vocab, int32_t* id_limit) {
  if (tables.vocab != ModelTables::Vocab::kObject) {
    return json.contains("vocab") && !json["vocab"].is_null()
               ? at.Child("vocab").Error("is not an object of token: id")
               : at.Error("has no 'vocab'");
  }
  vocab->reserve(tables.vocab_object.size());
  for (ModelTables::Entry& entry : tables.vocab_object) {
    if (!entry.valid || entry.id < 0 || entry.id > INT32_MAX) {
      return at.Child("vocab").Error(absl::StrCat("token '", entry.token, "' has no valid id"));
    }
    const int32_t value = static_cast<int32_t>(entry.id);
    (*vocab)[std::move(entry.token)] = value;
    *id_limit = std::max(*id_limit, value + 1);
  }
  return absl::OkStatus();
}

// --- WordPiece -----------------------------------------------------------------------------

class WordPieceModel : public Model {
 public:
  absl::Status Tokenize(absl::string_view word, std::vector<int32_t>* ids) const override {
    size_t chars = 0;
    for (unsigned char c : word) {
      chars += (c & 0xC0) != 0x80;
    }
    if (chars > max_chars_) {
      ids->push_back(unk_id_);
      return absl::OkStatus();
    }
    const size_t mark = ids->size();
    std::string candidate;
    size_t start = 0;
    while (start < word.size()) {
      size_t end = word.size();
      int32_t found = -1;
      while (end > start) {
        candidate.assign(start > 0 ? prefix_ : "");
        candidate.append(word.data() + start, end - start);
        found = Find(vocab_, candidate);
        if (found >= 0) {
          break;
        }
        // Back off by one character.
        do {
          --end;
        } while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
      }
      if (found < 0) {
        ids->resize(mark);
        ids->push_back(unk_id_);
        return absl::OkStatus();
      }
      ids->push_back(found);
      start = end;
    }
    return absl::OkStatus();
  }
  int32_t TokenToId(absl::string_view token) const override { return Find(vocab_, token); }
  int32_t size() const override { return static_cast<int32_t>(vocab_.size()); }
  int32_t id_limit() const override { return id_limit_; }

  Vocab vocab_;
  int32_t id_limit_ = 0;
  int32_t unk_id_ = 0;
  std::string prefix_;
  size_t max_chars_ = 100;
};

absl::StatusOr<std::unique_ptr<Model>> ParseWordPiece(const Json& json, const JsonPath& at,
                                                      ModelTables& tables) {
  auto model = std::make_unique<WordPieceModel>();
  RETURN_IF_ERROR(ParseVocabObject(json, tables, at, &model->vocab_, &model->id_limit_));
  ASSIGN_OR_RETURN(std::string unk, JsonString(json, "unk_token", "[UNK]", at));
  model->unk_id_ = Find(model->vocab_, unk);
  if (model->unk_id_ < 0) {
    return at.Error(absl::StrCat("unk_token '", unk, "' is not in the vocabulary"));
  }
  ASSIGN_OR_RETURN(model->prefix_, JsonString(json, "continuing_subword_prefix", "##", at));
  ASSIGN_OR_RETURN(int64_t max_chars, JsonInt(json, "max_input_chars_per_word", 100, at));
  if (max_chars < 0) {
    return at.Error("max_input_chars_per_word is negative");
  }
  model->max_chars_ = static_cast<size_t>(max_chars);
  return model;
}

// --- BPE -----------------------------------------------------------------------------------

class BpeModel : public Model {
 public:
  absl::Status Tokenize(absl::string_view word, std::vector<int32_t>* ids) const override;
  int32_t TokenToId(absl::string_view token) const override { return Find(vocab_, token); }
  int32_t size() const override { return static_cast<int32_t>(vocab_.size()); }
  int32_t id_limit() const override { return id_limit_; }

  struct MergeInfo {
    uint32_t rank;
    int32_t new_id;
  };
  static uint64_t Key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  Vocab vocab_;
  int32_t id_limit_ = 0;
  absl::flat_hash_map<uint64_t, MergeInfo> merges_;
  std::optional<std::string> unk_token_;
  std::string prefix_;
  std::string suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  int32_t byte_ids_[256];
};

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t len;  // bytes; 0 once merged into its left neighbour
};

struct QueuedMerge {
  uint32_t rank;
  int32_t pos;
  int32_t new_id;
  // std::priority_queue pops the greatest: the lowest rank, then the leftmost position.
  bool operator<(const QueuedMerge& other) const {
    return rank != other.rank ? rank > other.rank : pos > other.pos;
  }
};

absl::Status BpeModel::Tokenize(absl::string_view word, std::vector<int32_t>* ids) const {
  if (ignore_merges_) {
    if (const int32_t id = Find(vocab_, word); id >= 0) {
      ids->push_back(id);
      return absl::OkStatus();
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&symbols](int32_t id, size_t len) {
    const int32_t index = static_cast<int32_t>(symbols.size());
    if (index > 0) {
      symbols.back().next = index;
    }
    symbols.push_back({id, index - 1, -1, static_cast<uint32_t>(len)});
  };
  std::optional<std::pair<int32_t, size_t>> unk;  // a pending unknown (id, bytes)
  std::string buffer;
  const bool affixes = !prefix_.empty() || !suffix_.empty();
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::min(CharLength(static_cast<unsigned char>(word[i])), word.size() - i);
    absl::string_view s = word.substr(i, n);
    if (affixes) {
      buffer.clear();
      if (i > 0) buffer += prefix_;
      buffer.append(s.data(), s.size());
      if (i + n == word.size()) buffer += suffix_;
      s = buffer;
    }
    i += n;
    if (const int32_t id = Find(vocab_, s); id >= 0) {
      if (unk) {
        add(unk->first, unk->second);
        unk.reset();
      }
      add(id, n);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : s) {
        all = all && byte_ids_[b] >= 0;
      }
      if (all) {
        for (unsigned char b : s) {
          add(byte_ids_[b], 1);
        }
        continue;
      }
    }
    if (unk_token_) {
      const int32_t unk_id = Find(vocab_, *unk_token_);
      if (unk_id < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("BPE unk_token '", *unk_token_, "' is not in the vocabulary"));
      }
      if (unk && fuse_unk_) {
        unk->second += n;
      } else {
        if (unk) {
          add(unk->first, unk->second);
        }
        unk = std::make_pair(unk_id, n);
      }
    }
  }
  if (unk) {
    add(unk->first, unk->second);
  }

  std::priority_queue<QueuedMerge> queue;
  auto lookup = [this](int32_t a, int32_t b) -> const MergeInfo* {
    auto it = merges_.find(Key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const MergeInfo* m = lookup(symbols[k].id, symbols[k + 1].id)) {
      queue.push({m->rank, static_cast<int32_t>(k), m->new_id});
    }
  }
  while (!queue.empty()) {
    const QueuedMerge top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next == -1) {
      continue;
    }
    const int32_t right_pos = left.next;
    const Symbol right = symbols[right_pos];
    const MergeInfo* still = lookup(left.id, right.id);
    if (still == nullptr || still->new_id != top.new_id) {
      continue;  // stale: a neighbour changed since it was queued
    }
    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    symbols[right_pos].len = 0;
    if (right.next >= 0) {
      symbols[right.next].prev = top.pos;
    }
    if (left.prev >= 0) {
      if (const MergeInfo* m = lookup(symbols[left.prev].id, left.id)) {
        queue.push({m->rank, left.prev, m->new_id});
      }
    }
    if (left.next >= 0) {
      if (const MergeInfo* m = lookup(left.id, symbols[left.next].id)) {
        queue.push({m->rank, top.pos, m->new_id});
      }
    }
  }
  for (const Symbol& symbol : symbols) {
    if (symbol.len != 0) {
      ids->push_back(symbol.id);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Model>> ParseBpe(const Json& json, const JsonPath& at,
                                                ModelTables& tables) {
  auto model = std::make_unique<BpeModel>();
  auto dropout = json.find("dropout");
  if (dropout != json.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return at.Error("dropout is not supported (only null): it makes ids random");
  }
  RETURN_IF_ERROR(ParseVocabObject(json, tables, at, &model->vocab_, &model->id_limit_));
  auto unk = json.find("unk_token");
  if (unk != json.end() && !unk->is_null()) {
    if (!unk->is_string()) {
      return at.Error("'unk_token' is not a string");
    }
    model->unk_token_ = unk->get<std::string>();
  }
  ASSIGN_OR_RETURN(model->prefix_, JsonString(json, "continuing_subword_prefix", "", at));
  ASSIGN_OR_RETURN(model->suffix_, JsonString(json, "end_of_word_suffix", "", at));
  ASSIGN_OR_RETURN(model->fuse_unk_, JsonBool(json, "fuse_unk", false, at));
  ASSIGN_OR_RETURN(model->byte_fallback_, JsonBool(json, "byte_fallback", false, at));
  ASSIGN_OR_RETURN(model->ignore_merges_, JsonBool(json, "ignore_merges", false, at));
  ByteTokens(model->vocab_, model->byte_ids_);

  const JsonPath merges_at = at.Child("merges");
  if (!tables.has_merges) {
    return json.contains("merges") && !json["merges"].is_null() ? merges_at.Error("is not a list")
                                                                : at.Error("has no 'merges'");
  }
  if (tables.merges_not_list) {
    return merges_at.Error("is not a list");
  }
  model->merges_.reserve(tables.merges.size());
  std::string merged;
  uint32_t rank = 0;
  for (size_t i = 0; i < tables.merges.size(); ++i) {
    const ModelTables::Merge& entry = tables.merges[i];
    absl::string_view a, b;
    if (entry.valid && entry.line) {
      const std::string& line = entry.a;
      if (absl::StartsWith(line, "#version")) {
        continue;
      }
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return merges_at.Index(i).Error(
            absl::StrCat("merge '", line, "' is not two tokens separated by one space"));
      }
      a = absl::string_view(line).substr(0, space);
      b = absl::string_view(line).substr(space + 1);
    } else if (entry.valid) {
      a = entry.a;
      b = entry.b;
    } else {
      return merges_at.Index(i).Error("is not \"a b\" or [\"a\", \"b\"]");
    }
    const int32_t a_id = Find(model->vocab_, a);
    const int32_t b_id = Find(model->vocab_, b);
    if (a_id < 0 || b_id < 0) {
      return merges_at.Index(i).Error(
          absl::StrCat("merge token '", a_id < 0 ? a : b, "' is not in the vocabulary"));
    }
    if (b.size() < model->prefix_.size()) {
      return merges_at.Index(i).Error(
          absl::StrCat("merge token '", b, "' is shorter than continuing_subword_prefix"));
    }
    merged.assign(a.data(), a.size());
    merged.append(b.data() + model->prefix_.size(), b.size() - model->prefix_.size());
    const int32_t new_id = Find(model->vocab_, merged);
    if (new_id < 0) {
      return merges_at.Index(i).Error(
          absl::StrCat("merged token '", merged, "' is not in the vocabulary"));
    }
    // A repeated pair keeps its last rank, as `tokenizers`' map does.
    model->merges_[BpeModel::Key(a_id, b_id)] = {rank++, new_id};
  }
  return model;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> ParseUnigram(const Json& json, const JsonPath& at,
                                                    ModelTables& tables);

absl::StatusOr<std::unique_ptr<Model>> ParseModel(const Json& json, const JsonPath& at,
                                                  ModelTables& tables) {
  ASSIGN_OR_RETURN(std::string type, JsonType(json, at));
  if (type == "WordPiece") {
    return ParseWordPiece(json, at, tables);
  }
  if (type == "BPE") {
    return ParseBpe(json, at, tables);
  }
  if (type == "Unigram") {
    return ParseUnigram(json, at, tables);
  }
  return Unsupported(type, at);
}

}  // namespace sluice::text
