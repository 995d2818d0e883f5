// Post-processing: truncation (`tokenizers`' truncate_encodings) and the template
// (TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence), parsed from
// tokenizer.json and applied to the ids of one text or pair.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "text/tokenizer_impl.h"

namespace sluice::text {

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

// The post-processor as the template it amounts to (empty: none, the sequences as they are).
// RobertaProcessing is <s> A </s> (</s> B </s>) with every type id 0; ByteLevel's trim_offsets
// changes offsets only; a Sequence may hold at most one processor that adds tokens.
absl::Status ParsePostProcessor(const Json& json, const JsonPath& at,
                                std::vector<TemplateItem>* single,
                                std::vector<TemplateItem>* pair) {
  if (json.is_null()) {
    return absl::OkStatus();
  }
  const absl::string_view source = at.source;
  ASSIGN_OR_RETURN(std::string type, JsonType(json, at));
  if (type == "TemplateProcessing") {
    const Json special = json.value("special_tokens", Json::object());
    ASSIGN_OR_RETURN(*single,
                     ParseTemplate(json.value("single", Json()), special, "single", source));
    ASSIGN_OR_RETURN(*pair, ParseTemplate(json.value("pair", Json()), special, "pair", source));
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    ASSIGN_OR_RETURN(std::vector<int32_t> cls, BertSpecial(json, "cls", source));
    ASSIGN_OR_RETURN(std::vector<int32_t> sep, BertSpecial(json, "sep", source));
    if (type == "BertProcessing") {
      SetBertTemplates(std::move(cls), std::move(sep), single, pair);
    } else {
      *single = {{-1, cls, 0}, {0, {}, 0}, {-1, sep, 0}};
      *pair = {{-1, cls, 0}, {0, {}, 0}, {-1, sep, 0}, {-1, sep, 0}, {1, {}, 0}, {-1, sep, 0}};
    }
  } else if (type == "ByteLevel") {
    // Offsets only.
  } else if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* list, JsonMember(json, "processors", at));
    if (!list->is_array()) {
      return at.Error("'processors' is not a list");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      std::vector<TemplateItem> one;
      std::vector<TemplateItem> two;
      const JsonPath child = at.Child("processors").Index(i);
      RETURN_IF_ERROR(ParsePostProcessor((*list)[i], child, &one, &two));
      if (one.empty() && two.empty()) {
        continue;
      }
      if (!single->empty() || !pair->empty()) {
        return child.Error("a second processor that adds special tokens is not supported");
      }
      *single = std::move(one);
      *pair = std::move(two);
    }
  } else {
    return Unsupported(type, at);
  }
  return absl::OkStatus();
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

// Truncation (`tokenizers`' truncate_encodings, with the template's special tokens taken off
// the limit first) and the post-processing template. `options` overrides truncation for this call.
absl::StatusOr<Encoding> Tokenizer::Impl::Finish(std::vector<int32_t> a, std::vector<int32_t>* b,
                                                 const EncodeOptions& options,
                                                 std::vector<TokenOffsets>* offsets_a,
                                                 std::vector<TokenOffsets>* offsets_b) const {
  const bool is_pair = b != nullptr;
  const bool with_template = options.add_special_tokens;
  const int added = !with_template ? 0 : is_pair ? added_pair : added_single;
  const int limit_tokens = options.ignore_length_limit ? 0 : max_length;
  const bool cuts = options.truncate.value_or(truncate);
  const Direction from =
      options.direction.has_value()
          ? (*options.direction == TruncationDirection::kLeft ? Direction::kLeft
                                                              : Direction::kRight)
          : direction;
  const size_t total = a.size() + (is_pair ? b->size() : 0) + added;
  if (limit_tokens > 0 && total > static_cast<size_t>(limit_tokens)) {
    if (!cuts) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the text is %d tokens long, more than the limit of %d (truncation is off)", total,
          limit_tokens));
    }
  }
  // `tokenizers` truncates to max_length minus the template's special tokens; when that is
  // negative its unsigned subtraction wraps around and nothing is truncated. Same here.
  if (cuts && limit_tokens > 0 && limit_tokens >= added &&
      total > static_cast<size_t>(limit_tokens)) {
    const size_t limit = static_cast<size_t>(limit_tokens - added);
    auto cut = [&](std::vector<int32_t>& ids, std::vector<TokenOffsets>* offsets, size_t keep) {
      if (ids.size() <= keep) {
        return;
      }
      if (from == Direction::kRight) {
        ids.resize(keep);
        if (offsets != nullptr) offsets->resize(keep);
      } else {
        ids.erase(ids.begin(), ids.end() - keep);
        if (offsets != nullptr) offsets->erase(offsets->begin(), offsets->end() - keep);
      }
    };
    if (limit == 0) {
      cut(a, offsets_a, 0);
      if (is_pair) {
        cut(*b, offsets_b, 0);
      }
    } else if (!is_pair) {
      if (strategy == Strategy::kOnlySecond) {
        return absl::InvalidArgumentError("Truncation error: Second sequence not provided");
      }
      cut(a, offsets_a, limit);
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
      cut(a, offsets_a, n1);
      cut(*b, offsets_b, n2);
    } else {
      const bool first = strategy == Strategy::kOnlyFirst;
      std::vector<int32_t>& target = first ? a : *b;
      const size_t to_remove = a.size() + b->size() - limit;
      if (target.size() <= to_remove) {
        return absl::InvalidArgumentError(
            "Truncation error: Sequence to truncate too short to respect the provided max_length");
      }
      cut(target, first ? offsets_a : offsets_b, target.size() - to_remove);
    }
  }
  Encoding encoding;
  const bool with_offsets = offsets_a != nullptr;
  const std::vector<TemplateItem> no_template;
  const std::vector<TemplateItem>& items = !with_template ? no_template
                                           : is_pair      ? pair_template
                                                          : single_template;
  const size_t length = a.size() + (is_pair ? b->size() : 0) + added;
  encoding.ids.reserve(length);
  encoding.type_ids.reserve(length);
  if (items.empty()) {  // no post-processor: the sequences as they are
    encoding.ids = std::move(a);
    encoding.type_ids.assign(encoding.ids.size(), 0);
    if (with_offsets) {
      encoding.offsets = std::move(*offsets_a);
    }
    if (is_pair) {
      encoding.ids.insert(encoding.ids.end(), b->begin(), b->end());
      encoding.type_ids.resize(encoding.ids.size(), 1);
      if (with_offsets) {
        encoding.offsets.insert(encoding.offsets.end(), offsets_b->begin(), offsets_b->end());
      }
    }
    if (with_offsets) {
      encoding.special.assign(encoding.ids.size(), 0);
    }
  }
  for (const TemplateItem& item : items) {
    const std::vector<int32_t>& source = item.sequence < 0 ? item.ids : item.sequence == 0 ? a : *b;
    encoding.ids.insert(encoding.ids.end(), source.begin(), source.end());
    encoding.type_ids.resize(encoding.ids.size(), item.type_id);
    if (with_offsets) {
      if (item.sequence < 0) {
        encoding.offsets.resize(encoding.ids.size());  // -1, -1
        encoding.special.resize(encoding.ids.size(), 1);
      } else {
        const std::vector<TokenOffsets>& from_offsets =
            item.sequence == 0 ? *offsets_a : *offsets_b;
        encoding.offsets.insert(encoding.offsets.end(), from_offsets.begin(), from_offsets.end());
        encoding.special.resize(encoding.ids.size(), 0);
      }
    }
  }
  encoding.attention_mask.assign(encoding.ids.size(), 1);
  return encoding;
}

}  // namespace sluice::text
