// The Unigram model (`tokenizers`' models/unigram): the best-scoring segmentation of a piece
// into vocabulary entries (Viterbi), unknown characters scored min_score - 10 and fused into one
// unknown token, byte_fallback for what is not in the vocabulary.

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "text/models.h"

namespace sluice::text {
namespace {

constexpr double kUnkPenalty = 10.0;

// The score `tokenizers` sees for a number its file writes as `value`'s shortest decimal (as
// serde_json and Python write them). serde_json, without its float_roundtrip feature, does not
// round decimals correctly: it takes the digits as an integer, converts that to double (one
// rounding) and divides or multiplies by a power of ten (a second rounding), so a score can come
// out one unit in the last place away from `value`. Viterbi ties hinge on such units; the same
// arithmetic here keeps the ids identical.
double SerdeJsonDouble(double value) {
  static const std::vector<double>* pow10 = [] {
    auto* table = new std::vector<double>();
    for (int i = 0; i <= 308; ++i) {
      table->push_back(std::strtod(absl::StrCat("1e", i).c_str(), nullptr));
    }
    return table;
  }();
  if (!std::isfinite(value) || value == 0) {
    return value;
  }
  char buffer[64];
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  if (error != std::errc()) {
    return value;
  }
  const char* p = buffer;
  const bool negative = *p == '-';
  p += negative;
  uint64_t significand = 0;
  int exponent = 0;
  bool after_point = false;
  for (; p < end && *p != 'e'; ++p) {
    if (*p == '.') {
      after_point = true;
      continue;
    }
    significand = significand * 10 + static_cast<uint64_t>(*p - '0');  // at most 17 digits
    exponent -= after_point;
  }
  if (p < end && *p == 'e') {
    exponent += std::atoi(p + 1);
  }
  if (!after_point && exponent == 0) {
    return value;  // an integer: exact
  }
  double f = static_cast<double>(significand);
  while (true) {
    const int magnitude = exponent < 0 ? -exponent : exponent;
    if (magnitude <= 308) {
      f = exponent >= 0 ? f * (*pow10)[magnitude] : f / (*pow10)[magnitude];
      break;
    }
    if (f == 0 || exponent >= 0) {
      break;
    }
    f /= 1e308;
    exponent += 308;
  }
  return negative ? -f : f;
}

class UnigramModel : public Model {
 public:
  absl::Status Tokenize(absl::string_view word, std::vector<int32_t>* ids) const override;
  int32_t TokenToId(absl::string_view token) const override {
    auto it = token_ids_.find(token);
    return it == token_ids_.end() ? -1 : it->second;
  }
  int32_t size() const override { return static_cast<int32_t>(scores_.size()); }
  int32_t id_limit() const override { return static_cast<int32_t>(scores_.size()); }

  // A byte trie: child (node << 8 | byte) -> node; node_token_[node] is the id ending there.
  absl::flat_hash_map<uint64_t, uint32_t> children_;
  std::vector<int32_t> node_token_{-1};
  absl::flat_hash_map<std::string, int32_t> token_ids_;
  std::vector<double> scores_;
  double min_score_ = std::numeric_limits<double>::infinity();
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  int32_t byte_ids_[256];

  void Insert(absl::string_view token, int32_t id) {
    uint32_t node = 0;
    for (unsigned char c : token) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | c;
      auto [it, inserted] = children_.try_emplace(key, static_cast<uint32_t>(node_token_.size()));
      if (inserted) {
        node_token_.push_back(-1);
      }
      node = it->second;
    }
    node_token_[node] = id;
  }
};

absl::Status UnigramModel::Tokenize(absl::string_view word, std::vector<int32_t>* ids) const {
  struct Best {
    int32_t id = 0;
    double score = 0;
    int32_t starts_at = -1;  // -1: not reached yet
  };
  const size_t size = word.size();
  std::vector<Best> best(size + 1);
  const double unk_score = min_score_ - kUnkPenalty;
  const auto* s = reinterpret_cast<const unsigned char*>(word.data());
  for (size_t start = 0; start < size;) {
    const double here = best[start].score;
    const size_t mblen = s[start] < 0x80 ? 1 : s[start] < 0xE0 ? 2 : s[start] < 0xF0 ? 3 : 4;
    bool has_single = false;
    uint32_t node = 0;
    for (size_t end = start; end < size; ++end) {
      auto it = children_.find((static_cast<uint64_t>(node) << 8) | s[end]);
      if (it == children_.end()) {
        break;
      }
      node = it->second;
      const int32_t id = node_token_[node];
      if (id < 0) {
        continue;
      }
      Best& target = best[end + 1];
      const double candidate = scores_[id] + here;
      if (target.starts_at < 0 || candidate > target.score) {
        target = {id, candidate, static_cast<int32_t>(start)};
      }
      has_single = has_single || end + 1 - start == mblen;
    }
    if (!has_single) {
      if (!unk_id_) {
        return absl::InvalidArgumentError(
            "the Unigram model has no unk_id and a character is not in its vocabulary");
      }
      Best& target = best[start + mblen];
      const double candidate = unk_score + here;
      if (target.starts_at < 0 || candidate > target.score) {
        target = {*unk_id_, candidate, static_cast<int32_t>(start)};
      }
    }
    start += mblen;
  }
  // Back from the end: the pieces, unknown runs fused, then each piece to its id.
  std::vector<std::pair<size_t, size_t>> pieces;  // [start, end), last first
  size_t fused_end = 0;
  bool in_unk = false;
  for (size_t end = size; end > 0;) {
    const Best& node = best[end];
    const size_t start = static_cast<size_t>(node.starts_at);
    const bool is_unk = unk_id_ && node.id == *unk_id_;
    if (is_unk) {
      if (!in_unk) {
        fused_end = end;
        in_unk = true;
      }
    } else {
      if (in_unk) {
        pieces.emplace_back(end, fused_end);
        in_unk = false;
      }
      pieces.emplace_back(start, end);
    }
    end = start;
  }
  if (in_unk) {
    pieces.emplace_back(0, fused_end);
  }
  for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
    const absl::string_view piece = word.substr(it->first, it->second - it->first);
    if (const int32_t id = TokenToId(piece); id >= 0) {
      ids->push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : piece) {
        all = all && byte_ids_[b] >= 0;
      }
      if (all) {
        for (unsigned char b : piece) {
          ids->push_back(byte_ids_[b]);
        }
        continue;
      }
    }
    if (!unk_id_) {
      return absl::InvalidArgumentError("the Unigram model has no unk_id");
    }
    ids->push_back(*unk_id_);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> ParseUnigram(const Json& json, const JsonPath& at,
                                                    ModelTables& tables) {
  auto model = std::make_unique<UnigramModel>();
  const JsonPath vocab_at = at.Child("vocab");
  if (tables.vocab != ModelTables::Vocab::kArray) {
    return json.contains("vocab") || tables.vocab != ModelTables::Vocab::kAbsent
               ? vocab_at.Error("is not a list of [piece, score]")
               : at.Error("has no 'vocab'");
  }
  const size_t size = tables.vocab_array.size();
  model->scores_.reserve(size);
  model->token_ids_.reserve(size);
  for (size_t i = 0; i < size; ++i) {
    ModelTables::Scored& entry = tables.vocab_array[i];
    if (!entry.valid) {
      return vocab_at.Index(i).Error("is not [piece, score]");
    }
    const double score = SerdeJsonDouble(entry.score);
    // A repeated piece keeps its last id, as `tokenizers`.
    model->token_ids_[std::move(entry.piece)] = static_cast<int32_t>(i);
    model->scores_.push_back(score);
    model->min_score_ = std::min(model->min_score_, score);
  }
  for (const auto& [piece, id] : model->token_ids_) {
    model->Insert(piece, id);
  }
  auto unk = json.find("unk_id");
  if (unk != json.end() && !unk->is_null()) {
    if (!unk->is_number_integer() || unk->get<int64_t>() < 0 ||
        unk->get<int64_t>() >= static_cast<int64_t>(size)) {
      return at.Error(
          absl::StrCat("unk_id ", unk->dump(), " is out of range (vocabulary of ", size, ")"));
    }
    model->unk_id_ = unk->get<int32_t>();
  }
  ASSIGN_OR_RETURN(model->byte_fallback_, JsonBool(json, "byte_fallback", false, at));
  for (int b = 0; b < 256; ++b) {
    model->byte_ids_[b] = model->TokenToId(absl::StrFormat("<0x%02X>", b));
  }
  return model;
}

}  // namespace sluice::text
