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
#include "text/json_load.h"
#include "text/pipeline.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace sluice::text {

// Shared with post_processing.cc (tokenizer_impl.h).
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
                                             std::vector<int32_t>* ids,
                                             std::vector<TokenOffsets>* offsets) const {
  if (size_t bad = unicode::FindInvalidUtf8(text); bad != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%sinvalid UTF-8 at byte offset %d (byte 0x%02x starts no well-formed sequence)", name, bad,
        static_cast<unsigned char>(text[bad])));
  }
  if (pipeline != nullptr) {
    absl::Status status = pipeline->EncodeSequence(text, ids, offsets);
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(name, status.message()));
    }
    return absl::OkStatus();
  }
  Scratch scratch;
  scratch.offsets = offsets;
  // Added tokens split the raw text first; the pieces between them are tokenized on their own.
  size_t segment_start = 0;
  if (!added_tokens.empty()) {
    for (size_t i = 0; i < text.size(); ++i) {
      if (!added_first_byte[static_cast<unsigned char>(text[i])]) {
        continue;
      }
      for (const AddedToken& token : added_tokens) {
        if (text.compare(i, token.content.size(), token.content) == 0) {
          EncodeSegment(text.substr(segment_start, i - segment_start), segment_start, scratch, ids);
          ids->push_back(token.id);
          if (offsets != nullptr) {
            offsets->push_back(
                {static_cast<int64_t>(i), static_cast<int64_t>(i + token.content.size())});
          }
          i += token.content.size() - 1;
          segment_start = i + 1;
          break;
        }
      }
    }
  }
  EncodeSegment(text.substr(segment_start), segment_start, scratch, ids);
  return absl::OkStatus();
}

// --- Loading
// --------------------------------------------------------------------------------------

namespace {

absl::Status ParseBertNormalizer(const Json& json, NormalizerConfig* out,
                                 absl::string_view source) {
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

// Whether tokenizer.json is the BERT pipeline the fused single pass runs: WordPiece,
// BertNormalizer or none, BertPreTokenizer or none, added tokens without options.
bool IsFusedBertPipeline(const Json& json) {
  auto type_is = [&](const char* key, const char* type, bool null_ok) {
    auto it = json.find(key);
    if (it == json.end() || it->is_null()) {
      return null_ok;
    }
    return it->is_object() && it->value("type", Json()) == type;
  };
  if (!type_is("model", "WordPiece", false) || !type_is("normalizer", "BertNormalizer", true) ||
      !type_is("pre_tokenizer", "BertPreTokenizer", true)) {
    return false;
  }
  auto added = json.find("added_tokens");
  if (added != json.end() && added->is_array()) {
    for (const Json& token : *added) {
      if (!token.is_object()) {
        return false;
      }
      for (const char* flag : {"single_word", "lstrip", "rstrip", "normalized"}) {
        if (token.value(flag, Json()) == true) {
          return false;
        }
      }
    }
  }
  return true;
}

}  // namespace

// The BERT pipeline (WordPiece; BertNormalizer and BertPreTokenizer or none; added tokens
// without options), run fused in one pass.
absl::Status Tokenizer::Impl::LoadFusedBert(const Json& json, ModelTables& tables,
                                            absl::string_view source) {
  Impl* impl = this;
  char_flags = unicode::CharFlagTable();
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
  if (tables.vocab != ModelTables::Vocab::kObject) {
    return Invalid(source, "WordPiece model has no \"vocab\" object");
  }
  std::vector<std::pair<std::string, int32_t>> entries;
  entries.reserve(tables.vocab_object.size());
  for (ModelTables::Entry& entry : tables.vocab_object) {
    if (!entry.valid || entry.id < INT32_MIN || entry.id > INT32_MAX) {
      return Invalid(source,
                     absl::StrCat("vocabulary entry '", entry.token, "' has no integer id"));
    }
    entries.emplace_back(std::move(entry.token), static_cast<int32_t>(entry.id));
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

  RETURN_IF_ERROR(ParseBertNormalizer(json.value("normalizer", Json()), &impl->normalizer, source));

  const Json pre_tokenizer = json.value("pre_tokenizer", Json());
  if (!pre_tokenizer.is_null()) {
    ASSIGN_OR_RETURN(std::string type, ComponentType(pre_tokenizer, "the pre_tokenizer", source));
    if (type != "BertPreTokenizer") {
      return Invalid(source, absl::StrCat("pre_tokenizer type '", type,
                                          "' is not supported (only BertPreTokenizer)"));
    }
    impl->bert_pre_tokenizer = true;
  }

  return SetAddedTokens(json.value("added_tokens", Json()), source);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(absl::string_view text,
                                                               const TokenizerOptions& options,
                                                               absl::string_view source) {
  ModelTables tables;
  ASSIGN_OR_RETURN(Json json, ParseTokenizerJson(text, source, &tables));
  auto impl = std::make_unique<Impl>();

  if (IsFusedBertPipeline(json)) {
    RETURN_IF_ERROR(impl->LoadFusedBert(json, tables, source));
  } else {
    ASSIGN_OR_RETURN(impl->pipeline, Pipeline::Parse(json, source, tables));
    impl->vocab_size = impl->pipeline->vocab_size();
  }
  RETURN_IF_ERROR(ParsePostProcessor(json.value("post_processor", Json()),
                                     JsonPath{source, "post_processor"}, &impl->single_template,
                                     &impl->pair_template));
  impl->added_single = CountSpecial(impl->single_template);
  impl->added_pair = CountSpecial(impl->pair_template);
  // "decoder" and "padding" are not ours: decoding is never needed, and sequences are packed.
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
  impl->char_flags = unicode::CharFlagTable();
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

absl::StatusOr<Encoding> Tokenizer::Encode(absl::string_view text,
                                           const EncodeOptions& options) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4 + 8);
  std::vector<TokenOffsets> offsets;
  std::vector<TokenOffsets>* offsets_a = options.with_offsets ? &offsets : nullptr;
  RETURN_IF_ERROR(impl_->EncodeSequence(text, "", &ids, offsets_a));
  return impl_->Finish(std::move(ids), nullptr, options, offsets_a, nullptr);
}

absl::StatusOr<Encoding> Tokenizer::EncodePair(absl::string_view first, absl::string_view second,
                                               const EncodeOptions& options) const {
  std::vector<int32_t> a;
  std::vector<int32_t> b;
  std::vector<TokenOffsets> first_offsets;
  std::vector<TokenOffsets> second_offsets;
  std::vector<TokenOffsets>* offsets_a = options.with_offsets ? &first_offsets : nullptr;
  std::vector<TokenOffsets>* offsets_b = options.with_offsets ? &second_offsets : nullptr;
  RETURN_IF_ERROR(impl_->EncodeSequence(first, "first text: ", &a, offsets_a));
  RETURN_IF_ERROR(impl_->EncodeSequence(second, "second text: ", &b, offsets_b));
  // Cohere's max_tokens_per_doc: the second text's own tokens, its first ones, before the limit.
  if (options.max_second_tokens > 0 && b.size() > static_cast<size_t>(options.max_second_tokens)) {
    b.resize(static_cast<size_t>(options.max_second_tokens));
    if (offsets_b != nullptr) offsets_b->resize(b.size());
  }
  return impl_->Finish(std::move(a), &b, options, offsets_a, offsets_b);
}

int Tokenizer::vocab_size() const { return impl_->vocab_size; }
int32_t Tokenizer::TokenToId(absl::string_view token) const {
  if (impl_->pipeline != nullptr) {
    return impl_->pipeline->TokenToId(token);
  }
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
std::string Tokenizer::IdToToken(int32_t id) const {
  if (impl_->pipeline != nullptr) {
    return impl_->pipeline->AddedTokenContent(id);
  }
  for (const AddedToken& added : impl_->added_tokens) {
    if (added.id == id) {
      return added.content;
    }
  }
  for (const auto& [token, token_id] : impl_->vocab) {
    if (token_id == id) {
      return std::string(token);
    }
  }
  return std::string();
}
bool Tokenizer::exact_offsets() const { return impl_->pipeline == nullptr; }
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
