#include "text/json_load.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice::text {
namespace {

using DomParser = nlohmann::detail::json_sax_dom_parser<Json>;

// Forwards every event to nlohmann's DOM builder except those inside model.vocab and
// model.merges, which it collects into ModelTables (the DOM gets null there).
class TokenizerSax {
 public:
  TokenizerSax(Json* result, ModelTables* tables) : dom_(*result, false), tables_(tables) {}

  bool null() { return capture_ ? Scalar(Value{}) : dom_.null(); }
  bool boolean(bool b) { return capture_ ? Scalar(Value{}) : dom_.boolean(b); }
  bool number_integer(Json::number_integer_t v) {
    return capture_ ? Scalar(Value{Value::kInteger, v, static_cast<double>(v)})
                    : dom_.number_integer(v);
  }
  bool number_unsigned(Json::number_unsigned_t v) {
    const bool fits = v <= static_cast<Json::number_unsigned_t>(INT64_MAX);
    return capture_ ? Scalar(Value{fits ? Value::kInteger : Value::kFloat,
                                   fits ? static_cast<int64_t>(v) : 0, static_cast<double>(v)})
                    : dom_.number_unsigned(v);
  }
  bool number_float(Json::number_float_t v, const std::string& s) {
    return capture_ ? Scalar(Value{Value::kFloat, 0, v}) : dom_.number_float(v, s);
  }
  bool string(std::string& s) {
    if (!capture_) {
      return dom_.string(s);
    }
    Value value;
    value.kind = Value::kString;
    value.text = std::move(s);
    return Scalar(std::move(value));
  }
  bool binary(Json::binary_t& b) { return capture_ ? Scalar(Value{}) : dom_.binary(b); }

  bool start_object(std::size_t n) {
    if (capture_) {
      return Open(/*object=*/true);
    }
    if (StartsCapture("vocab")) {
      BeginCapture(Target::kVocabObject);
      return true;
    }
    if (StartsCapture("merges")) {
      tables_->has_merges = true;
      tables_->merges_not_list = true;
      BeginCapture(Target::kSkip);
      return true;
    }
    path_.push_back({true, ""});
    return dom_.start_object(n);
  }
  bool key(std::string& k) {
    if (capture_) {
      if (depth_ == 1 && target_ == Target::kVocabObject) {
        tables_->vocab_object.push_back({std::move(k), 0, false});
      }
      return true;
    }
    path_.back().key = k;
    return dom_.key(k);
  }
  bool end_object() {
    if (capture_) {
      return Close();
    }
    path_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (capture_) {
      return Open(/*object=*/false);
    }
    if (StartsCapture("vocab")) {
      BeginCapture(Target::kVocabArray);
      return true;
    }
    if (StartsCapture("merges")) {
      tables_->has_merges = true;
      BeginCapture(Target::kMerges);
      return true;
    }
    path_.push_back({false, ""});
    return dom_.start_array(n);
  }
  bool end_array() {
    if (capture_) {
      return Close();
    }
    path_.pop_back();
    return dom_.end_array();
  }
  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& e) {
    return dom_.parse_error(position, token, e);
  }

 private:
  enum class Target { kVocabObject, kVocabArray, kMerges, kSkip };
  struct Frame {
    bool object;
    std::string key;
  };
  struct Value {
    enum Kind { kOther, kInteger, kFloat, kString };
    Kind kind = kOther;
    int64_t integer = 0;
    double number = 0;
    std::string text;
  };

  // Whether the container opening now is model.<member> of the root object.
  bool StartsCapture(const char* member) const {
    return path_.size() == 2 && path_[0].object && path_[0].key == "model" && path_[1].object &&
           path_[1].key == member;
  }
  void BeginCapture(Target target) {
    target_ = target;
    capture_ = true;
    depth_ = 1;
    if (target == Target::kVocabObject) {
      tables_->vocab = ModelTables::Vocab::kObject;
    } else if (target == Target::kVocabArray) {
      tables_->vocab = ModelTables::Vocab::kArray;
    }
  }
  bool Open(bool object) {
    ++depth_;
    if (depth_ == 2) {  // an entry of the captured container
      if (target_ == Target::kVocabArray) {
        tables_->vocab_array.push_back({});
        entry_items_ = object ? -100 : 0;
      } else if (target_ == Target::kMerges) {
        tables_->merges.push_back({});
        entry_items_ = object ? -100 : 0;
      } else if (target_ == Target::kVocabObject) {
        // A value that is an object or list: not an id (stays invalid).
      }
    } else if (depth_ > 2) {
      entry_items_ = -100;  // nested deeper: the entry is malformed
    }
    return true;
  }
  bool Close() {
    if (depth_ == 2) {
      if (target_ == Target::kVocabArray) {
        auto& e = tables_->vocab_array.back();
        e.valid = e.valid && entry_items_ == 2;
      } else if (target_ == Target::kMerges) {
        auto& m = tables_->merges.back();
        m.valid = entry_items_ == 2;
      }
    }
    if (--depth_ == 0) {
      capture_ = false;
      return dom_.null();  // the DOM's value for model.vocab / model.merges
    }
    return true;
  }
  bool Scalar(Value value) {
    switch (target_) {
      case Target::kSkip:
        break;
      case Target::kVocabObject:
        if (depth_ == 1 && !tables_->vocab_object.empty() && value.kind == Value::kInteger) {
          tables_->vocab_object.back().id = value.integer;
          tables_->vocab_object.back().valid = true;
        }
        break;
      case Target::kVocabArray:
        if (depth_ == 1) {
          tables_->vocab_array.push_back({});  // a bare scalar: invalid entry
        } else if (depth_ == 2) {
          auto& e = tables_->vocab_array.back();
          if (entry_items_ == 0 && value.kind == Value::kString) {
            e.piece = std::move(value.text);
          } else if (entry_items_ == 1 &&
                     (value.kind == Value::kInteger || value.kind == Value::kFloat)) {
            e.score = value.number;
            e.valid = true;
          } else {
            entry_items_ = -100;
          }
          ++entry_items_;
        }
        break;
      case Target::kMerges:
        if (depth_ == 1) {
          ModelTables::Merge m;
          if (value.kind == Value::kString) {
            m.a = std::move(value.text);
            m.line = true;
            m.valid = true;
          }
          tables_->merges.push_back(std::move(m));
        } else if (depth_ == 2) {
          auto& m = tables_->merges.back();
          if (value.kind != Value::kString) {
            entry_items_ = -100;
          } else if (entry_items_ == 0) {
            m.a = std::move(value.text);
          } else if (entry_items_ == 1) {
            m.b = std::move(value.text);
          }
          ++entry_items_;
        }
        break;
    }
    return true;
  }

  DomParser dom_;
  ModelTables* tables_;
  std::vector<Frame> path_;
  bool capture_ = false;
  Target target_ = Target::kSkip;
  int depth_ = 0;
  int entry_items_ = 0;
};

}  // namespace

absl::StatusOr<Json> ParseTokenizerJson(absl::string_view text, absl::string_view source,
                                        ModelTables* tables) {
  Json result;
  TokenizerSax sax(&result, tables);
  const bool ok = Json::sax_parse(text.begin(), text.end(), &sax);
  if (!ok || result.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": malformed JSON"));
  }
  if (!result.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  return result;
}

}  // namespace sluice::text
