#pragma once

// Parsing a tokenizer.json fast: its model's vocabulary and merges (hundreds of thousands of
// entries: Qwen, XLM-R) are read straight into flat vectors during the parse instead of into
// nlohmann-json's DOM, whose std::map per object costs most of the load; everything else becomes
// the usual DOM, where the model's "vocab" and "merges" members are then null. Internal to text/.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "text/json_util.h"

namespace sluice::text {

// The model's large tables as the file holds them.
struct ModelTables {
  enum class Vocab { kAbsent, kObject, kArray, kOther };
  Vocab vocab = Vocab::kAbsent;
  // An object of token: id (WordPiece, BPE); `valid` false where the value is not an integer.
  struct Entry {
    std::string token;
    int64_t id = 0;
    bool valid = false;
  };
  std::vector<Entry> vocab_object;
  // A list of [piece, score] (Unigram); `valid` false where an entry has another shape.
  struct Scored {
    std::string piece;
    double score = 0;
    bool valid = false;
  };
  std::vector<Scored> vocab_array;
  // The merges: a "a b" line (`line`), an ["a", "b"] pair, or neither (`valid` false).
  bool has_merges = false;  // a list was there
  bool merges_not_list = false;
  struct Merge {
    std::string a;  // the whole line when `line`
    std::string b;
    bool line = false;
    bool valid = false;
  };
  std::vector<Merge> merges;
};

// Parses tokenizer.json text. InvalidArgument "<source>: malformed JSON" or "not a JSON object".
absl::StatusOr<Json> ParseTokenizerJson(absl::string_view text, absl::string_view source,
                                        ModelTables* tables);

}  // namespace sluice::text
