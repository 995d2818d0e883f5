#include "text/tokenizer.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::text {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A small tokenizer.json: the MiniLM layout with a vocabulary of a few words.
// Ids: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, then the words in order.
constexpr const char* kWords[] = {"hello",  "world", "##s",  ",", "!", "un", "##believ",
                                  "##able", "a",     "b",    "c", "d", "e",  "f",
                                  "g",      "h",     "cafe", "i", "##̇"};

std::string Vocab() {
  std::string vocab = R"("[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4)";
  int id = 5;
  for (const char* word : kWords) {
    absl::StrAppend(&vocab, ", \"", word, "\": ", id++);
  }
  return vocab;
}

int32_t Id(const char* word) {
  for (int i = 0; i < static_cast<int>(std::size(kWords)); ++i) {
    if (std::string(kWords[i]) == word) {
      return 5 + i;
    }
  }
  ADD_FAILURE() << "no word " << word;
  return -1;
}

std::string TokenizerJson(const std::string& truncation = "null",
                          const std::string& model_type = "WordPiece",
                          const std::string& normalizer = "\"BertNormalizer\"",
                          const std::string& extra_added = "") {
  return absl::StrCat(R"({
    "version": "1.0",
    "truncation": )",
                      truncation, R"(,
    "padding": null,
    "added_tokens": [
      {"id": 0, "content": "[PAD]", "single_word": false, "lstrip": false, "rstrip": false,
       "normalized": false, "special": true},
      {"id": 2, "content": "[CLS]", "single_word": false, "lstrip": false, "rstrip": false,
       "normalized": false, "special": true},
      {"id": 3, "content": "[SEP]", "single_word": false, "lstrip": false, "rstrip": false,
       "normalized": false, "special": true},
      {"id": 4, "content": "[MASK]", "single_word": false, "lstrip": false, "rstrip": false,
       "normalized": false, "special": true})",
                      extra_added, R"(],
    "normalizer": {"type": )",
                      normalizer, R"(, "clean_text": true, "handle_chinese_chars": true,
                   "strip_accents": null, "lowercase": true},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
    "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
    "model": {"type": ")",
                      model_type, R"(", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": 12, "vocab": {)",
                      Vocab(), "}}}");
}

std::unique_ptr<Tokenizer> Make(const std::string& json, TokenizerOptions options = {}) {
  auto tokenizer = Tokenizer::FromJson(json, options);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

TEST(TokenizerTest, EncodesWithNormalizationPunctuationAndSubwords) {
  auto tokenizer = Make(TokenizerJson());
  ASSERT_NE(tokenizer, nullptr);
  auto encoding = tokenizer->Encode("Hello,  WORLDS!\tunbelievable Café");
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  EXPECT_THAT(encoding->ids, ElementsAre(2, Id("hello"), Id(","), Id("world"), Id("##s"), Id("!"),
                                         Id("un"), Id("##believ"), Id("##able"), Id("cafe"), 3));
  EXPECT_EQ(encoding->num_tokens(), 11);
  EXPECT_EQ(encoding->type_ids, std::vector<int32_t>(11, 0));
  EXPECT_EQ(encoding->attention_mask, std::vector<int32_t>(11, 1));
}

TEST(TokenizerTest, UnknownWordsAndOverLongWordsAreOneUnknownToken) {
  auto tokenizer = Make(TokenizerJson());
  ASSERT_NE(tokenizer, nullptr);
  // "hellox": no "##x"; "abcdefghabcde" is 13 characters, over max_input_chars_per_word (12).
  auto encoding = tokenizer->Encode("hellox abcdefghabcde hello");
  ASSERT_TRUE(encoding.ok());
  EXPECT_THAT(encoding->ids, ElementsAre(2, 1, 1, Id("hello"), 3));
}

TEST(TokenizerTest, AddedTokensAreMatchedInTheRawText) {
  auto tokenizer = Make(TokenizerJson());
  ASSERT_NE(tokenizer, nullptr);
  auto encoding = tokenizer->Encode("a[MASK]b [mask] [SEP]");
  ASSERT_TRUE(encoding.ok());
  // "[mask]" is not the token (normalized: false): it is "[", "mask" (unknown), "]".
  EXPECT_THAT(encoding->ids, ElementsAre(2, Id("a"), 4, Id("b"), 1, 1, 1, 3, 3));
}

TEST(TokenizerTest, LowercaseIsRustsCharToLowercase) {
  // Uncased (accents stripped first): İ is I + U+0307 after NFD, the mark goes, "i" is left.
  auto uncased = Make(TokenizerJson());
  ASSERT_NE(uncased, nullptr);
  EXPECT_THAT(uncased->Encode("\xC4\xB0")->ids, ElementsAre(2, Id("i"), 3));
  // Without accent stripping İ lowercases to "i" + U+0307 (SpecialCasing), not to "i".
  std::string json = TokenizerJson();
  json.replace(json.find("\"strip_accents\": null"), 21, "\"strip_accents\": false");
  auto tokenizer = Make(json);
  ASSERT_NE(tokenizer, nullptr);
  auto encoding = tokenizer->Encode("\xC4\xB0");
  ASSERT_TRUE(encoding.ok());
  EXPECT_THAT(encoding->ids, ElementsAre(2, Id("i"), Id("##̇"), 3));
}

TEST(TokenizerTest, PairsGetTypeIds) {
  auto tokenizer = Make(TokenizerJson());
  ASSERT_NE(tokenizer, nullptr);
  auto encoding = tokenizer->EncodePair("hello", "world !");
  ASSERT_TRUE(encoding.ok());
  EXPECT_THAT(encoding->ids, ElementsAre(2, Id("hello"), 3, Id("world"), Id("!"), 3));
  EXPECT_THAT(encoding->type_ids, ElementsAre(0, 0, 0, 1, 1, 1));
  auto empty = tokenizer->EncodePair("", "");
  ASSERT_TRUE(empty.ok());
  EXPECT_THAT(empty->ids, ElementsAre(2, 3, 3));
}

TEST(TokenizerLoadTest, RefusesUnknownComponentsByNameAndPath) {
  auto model = Tokenizer::FromJson(TokenizerJson("null", "WordLevel"));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(),
              HasSubstr("tokenizer.json: model: type 'WordLevel' is not supported"));
  auto normalizer = Tokenizer::FromJson(TokenizerJson("null", "WordPiece", "\"Foo\""));
  EXPECT_THAT(normalizer.status().message(), HasSubstr("normalizer: type 'Foo' is not supported"));
  std::string json = TokenizerJson();
  json.replace(json.find("BertPreTokenizer"), 16, "UnicodeScripts");
  EXPECT_THAT(Tokenizer::FromJson(json).status().message(),
              HasSubstr("pre_tokenizer: type 'UnicodeScripts' is not supported"));
  json = TokenizerJson();
  json.replace(json.find("BertProcessing"), 14, "Bogus");
  EXPECT_THAT(Tokenizer::FromJson(json).status().message(),
              HasSubstr("post_processor: type 'Bogus' is not supported"));
}

TEST(TokenizerLoadTest, OtherComponentsTakeTheGeneralPipeline) {
  // NFKC, Whitespace, RobertaProcessing and added-token options are supported now.
  auto nfkc = Tokenizer::FromJson(TokenizerJson("null", "WordPiece", "\"NFKC\""));
  ASSERT_TRUE(nfkc.ok()) << nfkc.status();
  EXPECT_THAT((*nfkc)->Encode("hello")->ids, ElementsAre(2, Id("hello"), 3));
  auto lstrip = Tokenizer::FromJson(
      TokenizerJson("null", "WordPiece", "\"BertNormalizer\"",
                    R"(, {"id": 24, "content": "<x>", "lstrip": true, "normalized": false})"));
  ASSERT_TRUE(lstrip.ok()) << lstrip.status();
  EXPECT_THAT((*lstrip)->Encode("hello  <x>world")->ids,
              ElementsAre(2, Id("hello"), 24, Id("world"), 3));
}

TEST(TokenizerLoadTest, MalformedJsonAndMissingParts) {
  auto malformed = Tokenizer::FromJson("{\"model\": ", {}, "m/tokenizer.json");
  EXPECT_EQ(malformed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(malformed.status().message(), HasSubstr("m/tokenizer.json: malformed JSON"));
  EXPECT_THAT(Tokenizer::FromJson("[1, 2]").status().message(), HasSubstr("not a JSON object"));
  EXPECT_THAT(Tokenizer::FromJson("{}").status().message(), HasSubstr("no \"model\""));
  EXPECT_THAT(Tokenizer::FromJson(R"({"model": {"type": "WordPiece"}})").status().message(),
              HasSubstr("no \"vocab\""));
  EXPECT_THAT(Tokenizer::FromJson(R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})")
                  .status()
                  .message(),
              HasSubstr("unk_token '[UNK]' is not in the vocabulary"));
  EXPECT_EQ(Tokenizer::LoadJson("/nonexistent/tokenizer.json").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Tokenizer::LoadFolder("/nonexistent").status().code(), absl::StatusCode::kNotFound);
}

TEST(TokenizerLoadTest, VocabTxtNeedsItsSpecialTokens) {
  auto missing = Tokenizer::FromVocab("[UNK]\n[SEP]\nhello\n", "");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("cls_token '[CLS]' is not in the vocabulary"));
  auto tokenizer = Tokenizer::FromVocab("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n##s\n", "");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto encoding = (*tokenizer)->Encode("HELLOS");
  ASSERT_TRUE(encoding.ok());
  EXPECT_THAT(encoding->ids, ElementsAre(2, 4, 5, 3));
  // Six lines, six tokens: the final line break is not a token.
  EXPECT_EQ((*tokenizer)->vocab_size(), 6);
  auto cased =
      Tokenizer::FromVocab("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n", R"({"do_lower_case": false})");
  ASSERT_TRUE(cased.ok());
  EXPECT_THAT((*cased)->Encode("HELLO hello")->ids, ElementsAre(2, 1, 4, 3));
  EXPECT_THAT(Tokenizer::FromVocab("[UNK]\n", "{").status().message(),
              HasSubstr("tokenizer_config.json: malformed JSON"));
}

TEST(TokenizerTest, InvalidUtf8IsInvalidArgumentWithItsOffset) {
  auto tokenizer = Make(TokenizerJson());
  ASSERT_NE(tokenizer, nullptr);
  struct Case {
    std::string text;
    size_t offset;
  };
  const Case cases[] = {
      {"ab\xC3(", 2},              // a lead byte without its continuation
      {"\x80", 0},                 // a lone continuation byte
      {"x\xC0\x80", 1},            // overlong NUL
      {"xy\xE0\x80\xAF", 2},       // overlong 3-byte form
      {"\xED\xA0\x80", 0},         // a surrogate
      {"ok \xF4\x90\x80\x80", 3},  // above U+10FFFF
      {"abc\xE2\x82", 3},          // truncated at the end
      {"hello \xF0\x9F\x98", 6},   // truncated 4-byte sequence
      {"\xFF", 0},                 // never valid
      {"caf\xC3\xA9 \xFE", 6},     // after valid multi-byte text
  };
  for (const Case& c : cases) {
    auto encoding = tokenizer->Encode(c.text);
    ASSERT_FALSE(encoding.ok()) << c.offset;
    EXPECT_EQ(encoding.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(encoding.status().message(),
                HasSubstr(absl::StrCat("invalid UTF-8 at byte offset ", c.offset, " ")));
  }
  auto pair = tokenizer->EncodePair("fine", "bad \xC3");
  EXPECT_THAT(pair.status().message(), HasSubstr("second text: invalid UTF-8 at byte offset 4"));
  // Valid edge cases: the largest code point, a 4-byte emoji, U+FFFD itself (cleaned away).
  EXPECT_TRUE(tokenizer->Encode("\xF4\x8F\xBF\xBF \xF0\x9F\x98\x80 \xEF\xBF\xBD").ok());
}

TEST(TokenizerTruncationTest, SingleTextEdges) {
  const std::string json = TokenizerJson(R"({"max_length": 5, "strategy": "LongestFirst",
                                             "direction": "Right", "stride": 0})");
  auto tokenizer = Make(json);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->max_length(), 5);
  EXPECT_TRUE(tokenizer->truncates());
  // Exactly at the limit: untouched.
  EXPECT_THAT(tokenizer->Encode("a b c")->ids, ElementsAre(2, Id("a"), Id("b"), Id("c"), 3));
  // One over: the last word goes, the [SEP] stays.
  EXPECT_THAT(tokenizer->Encode("a b c d")->ids, ElementsAre(2, Id("a"), Id("b"), Id("c"), 3));
  // Left truncation keeps the end.
  auto left = Make(TokenizerJson(R"({"max_length": 4, "strategy": "LongestFirst",
                                     "direction": "Left", "stride": 0})"));
  EXPECT_THAT(left->Encode("a b c d")->ids, ElementsAre(2, Id("c"), Id("d"), 3));
  // A limit of just the special tokens leaves only them; one below them truncates nothing
  // (tokenizers' unsigned limit - specials wraps around), for single texts and pairs alike.
  auto tiny = Make(TokenizerJson(R"({"max_length": 2, "strategy": "LongestFirst",
                                     "stride": 0})"));
  EXPECT_THAT(tiny->Encode("a b c d")->ids, ElementsAre(2, 3));
  EXPECT_THAT(tiny->EncodePair("a b", "c")->ids, ElementsAre(2, Id("a"), Id("b"), 3, Id("c"), 3));
  auto tinier = Make(TokenizerJson(R"({"max_length": 1, "strategy": "LongestFirst",
                                       "stride": 0})"));
  EXPECT_THAT(tinier->Encode("a b")->ids, ElementsAre(2, Id("a"), Id("b"), 3));
}

TEST(TokenizerTruncationTest, PairsAreTruncatedLongestFirst) {
  auto tokenizer = Make(TokenizerJson(R"({"max_length": 8, "strategy": "LongestFirst",
                                          "stride": 0})"));
  ASSERT_NE(tokenizer, nullptr);
  // Room for 5 of 4 + 2: the longer one gives up one.
  auto encoding = tokenizer->EncodePair("a b c d", "e f");
  ASSERT_TRUE(encoding.ok());
  EXPECT_THAT(encoding->ids, ElementsAre(2, Id("a"), Id("b"), Id("c"), 3, Id("e"), Id("f"), 3));
  // Both long: 5 split as 2 + 3, the second getting the odd one.
  encoding = tokenizer->EncodePair("a b c d", "e f g h");
  ASSERT_TRUE(encoding.ok());
  EXPECT_THAT(encoding->ids, ElementsAre(2, Id("a"), Id("b"), 3, Id("e"), Id("f"), Id("g"), 3));
  EXPECT_THAT(encoding->type_ids, ElementsAre(0, 0, 0, 0, 1, 1, 1, 1));
}

TEST(TokenizerTruncationTest, OnlyFirstFailsWhenTheFirstIsTooShort) {
  auto tokenizer = Make(TokenizerJson(R"({"max_length": 6, "strategy": "OnlyFirst",
                                          "stride": 0})"));
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_THAT(tokenizer->EncodePair("a b c", "e f")->ids,
              ElementsAre(2, Id("a"), 3, Id("e"), Id("f"), 3));
  auto too_short = tokenizer->EncodePair("a", "e f g h");
  EXPECT_EQ(too_short.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_short.status().message(), HasSubstr("too short"));
}

TEST(TokenizerTruncationTest, CallerLimitAndRejection) {
  // The caller's limit wins over tokenizer.json's.
  TokenizerOptions options;
  options.max_length = 4;
  auto tokenizer = Make(TokenizerJson(R"({"max_length": 100, "strategy": "LongestFirst",
                                          "stride": 0})"),
                        options);
  EXPECT_THAT(tokenizer->Encode("a b c d")->ids, ElementsAre(2, Id("a"), Id("b"), 3));
  // No truncation block: over-long texts are refused, naming the limit.
  auto strict = Make(TokenizerJson(), options);
  EXPECT_FALSE(strict->truncates());
  EXPECT_TRUE(strict->Encode("a b").ok());
  auto refused = strict->Encode("a b c");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("5 tokens long, more than the limit of 4"));
  // Forced on without a block: LongestFirst, Right.
  options.truncation = TruncationMode::kTruncate;
  EXPECT_THAT(Make(TokenizerJson(), options)->Encode("a b c")->ids,
              ElementsAre(2, Id("a"), Id("b"), 3));
  // No limit at all: anything goes.
  EXPECT_TRUE(Make(TokenizerJson())->Encode(std::string(5000, 'a') + " b").ok());
}

TEST(TokenizerTruncationTest, PerCallOptionsOverrideTheLoadedPolicy) {
  TokenizerOptions options;
  options.max_length = 4;
  auto truncating = Make(TokenizerJson(R"({"max_length": 100, "strategy": "LongestFirst",
                                           "stride": 0})"),
                         options);
  ASSERT_NE(truncating, nullptr);
  // truncate: false refuses what the tokenizer would cut, naming the length and the limit.
  EncodeOptions refuse;
  refuse.truncate = false;
  auto refused = truncating->Encode("a b c", refuse);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("5 tokens long, more than the limit of 4"));
  EXPECT_TRUE(truncating->Encode("a b", refuse).ok());
  // truncate: true cuts what a tokenizer without a truncation block refuses; Left keeps the end.
  auto strict = Make(TokenizerJson(), options);
  ASSERT_NE(strict, nullptr);
  EncodeOptions cut;
  cut.truncate = true;
  EXPECT_THAT(strict->Encode("a b c d", cut)->ids, ElementsAre(2, Id("a"), Id("b"), 3));
  cut.direction = TruncationDirection::kLeft;
  EXPECT_THAT(strict->Encode("a b c d", cut)->ids, ElementsAre(2, Id("c"), Id("d"), 3));
  // ignore_length_limit: nothing cut, nothing refused.
  EncodeOptions whole;
  whole.ignore_length_limit = true;
  EXPECT_EQ(strict->Encode("a b c d", whole)->num_tokens(), 6);
  // add_special_tokens: false leaves the template out (and its tokens off the limit).
  EncodeOptions bare;
  bare.add_special_tokens = false;
  EXPECT_THAT(strict->Encode("a b c d", bare)->ids,
              ElementsAre(Id("a"), Id("b"), Id("c"), Id("d")));
  EXPECT_FALSE(strict->Encode("a b c d e", bare).ok());
}

TEST(TokenizerTruncationTest, MaxSecondTokensCutsTheSecondTextFirst) {
  auto tokenizer = Make(TokenizerJson(R"({"max_length": 8, "strategy": "LongestFirst",
                                          "stride": 0})"));
  ASSERT_NE(tokenizer, nullptr);
  EncodeOptions options;
  options.max_second_tokens = 2;
  auto encoding = tokenizer->EncodePair("a", "e f g h", options);
  ASSERT_TRUE(encoding.ok());
  EXPECT_THAT(encoding->ids, ElementsAre(2, Id("a"), 3, Id("e"), Id("f"), 3));
  EXPECT_THAT(encoding->type_ids, ElementsAre(0, 0, 0, 1, 1, 1));
  // Then the length limit as usual: 5 + 2 + 3 specials over 8, LongestFirst.
  encoding = tokenizer->EncodePair("a b c d e", "e f g h", options);
  ASSERT_TRUE(encoding.ok());
  EXPECT_THAT(encoding->ids, ElementsAre(2, Id("a"), Id("b"), Id("c"), 3, Id("e"), Id("f"), 3));
}

// Offsets are byte ranges of the input, as `tokenizers`' Rust Encoding::get_offsets() gives them
// (text/reference_test.py checks them against it on the whole corpus).
TEST(TokenizerOffsetsTest, BytesOfTheInputPerToken) {
  auto tokenizer = Make(TokenizerJson());
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_TRUE(tokenizer->exact_offsets());
  EncodeOptions options;
  options.with_offsets = true;
  // "Café" is 5 bytes (é is two): its token spans all of them, accent stripped or not.
  const std::string text = "Hello,  unbelievable [SEP] Caf\xC3\xA9 hellox";
  auto encoding = tokenizer->Encode(text, options);
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  EXPECT_THAT(encoding->ids, ElementsAre(2, Id("hello"), Id(","), Id("un"), Id("##believ"),
                                         Id("##able"), 3, Id("cafe"), 1, 3));
  std::vector<std::pair<int64_t, int64_t>> offsets;
  for (const TokenOffsets& at : encoding->offsets) offsets.emplace_back(at.start, at.stop);
  EXPECT_THAT(offsets,
              ElementsAre(std::pair<int64_t, int64_t>{-1, -1}, std::pair<int64_t, int64_t>{0, 5},
                          std::pair<int64_t, int64_t>{5, 6}, std::pair<int64_t, int64_t>{8, 10},
                          std::pair<int64_t, int64_t>{10, 16}, std::pair<int64_t, int64_t>{16, 20},
                          std::pair<int64_t, int64_t>{21, 26},  // [SEP] in the text
                          std::pair<int64_t, int64_t>{27, 32},
                          std::pair<int64_t, int64_t>{33, 39},  // an unknown word
                          std::pair<int64_t, int64_t>{-1, -1}));
  EXPECT_THAT(encoding->special, ElementsAre(1, 0, 0, 0, 0, 0, 0, 0, 0, 1));
  // Without the option there are none.
  EXPECT_TRUE(tokenizer->Encode(text)->offsets.empty());
  // Pairs: each token's offsets are in its own text; truncation cuts them with the ids.
  auto pair = tokenizer->EncodePair("hello", "a world", options);
  ASSERT_TRUE(pair.ok());
  EXPECT_EQ(pair->offsets[1].start, 0);
  EXPECT_EQ(pair->offsets[3].start, 0);
  EXPECT_EQ(pair->offsets[4].start, 2);
  EXPECT_EQ(pair->offsets[4].stop, 7);
  EXPECT_EQ(tokenizer->IdToToken(2), "[CLS]");
  EXPECT_EQ(tokenizer->IdToToken(Id("world")), "world");
}

TEST(TokenizerTest, ConcurrentUseGivesTheSameIds) {
  auto tokenizer = Make(TokenizerJson());
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<std::string> texts = {"Hello, worlds!", "unbelievable café", "a[MASK]b",
                                          "\xC4\xB0 \xE4\xB8\xAD\xE6\x96\x87", ""};
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& text : texts) {
    expected.push_back(tokenizer->Encode(text)->ids);
  }
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 500; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          if (tokenizer->Encode(texts[i])->ids != expected[i]) {
            ++mismatches[t];
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  EXPECT_THAT(mismatches, ElementsAre(0, 0, 0, 0));
}

class MaxSequenceLengthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("sluice_text_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& contents) {
    std::ofstream(dir_ / name) << contents;
  }
  std::filesystem::path dir_;
};

TEST_F(MaxSequenceLengthTest, PicksInOrder) {
  EXPECT_EQ(ReadMaxSequenceLength(dir_).status().code(), absl::StatusCode::kNotFound);
  Write("config.json", R"({"max_position_embeddings": 512})");
  EXPECT_EQ(*ReadMaxSequenceLength(dir_), 512);
  Write("tokenizer.json", R"({"truncation": {"max_length": 128}})");
  EXPECT_EQ(*ReadMaxSequenceLength(dir_), 128);
  // transformers' "no limit" placeholder is skipped.
  Write("tokenizer_config.json", R"({"model_max_length": 1000000000000000019884624838656})");
  EXPECT_EQ(*ReadMaxSequenceLength(dir_), 128);
  Write("tokenizer_config.json", R"({"model_max_length": 384})");
  EXPECT_EQ(*ReadMaxSequenceLength(dir_), 384);
  Write("sentence_bert_config.json", R"({"max_seq_length": 256, "do_lower_case": false})");
  EXPECT_EQ(*ReadMaxSequenceLength(dir_), 256);
  Write("sentence_bert_config.json", R"({"max_seq_length": 0})");
  EXPECT_EQ(ReadMaxSequenceLength(dir_).status().code(), absl::StatusCode::kInvalidArgument);
  Write("sentence_bert_config.json", "{");
  EXPECT_THAT(ReadMaxSequenceLength(dir_).status().message(), HasSubstr("malformed JSON"));
}

TEST_F(MaxSequenceLengthTest, LoadFolderPrefersTokenizerJson) {
  Write("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nworld\n");
  auto from_vocab = Tokenizer::LoadFolder(dir_);
  ASSERT_TRUE(from_vocab.ok()) << from_vocab.status();
  EXPECT_THAT((*from_vocab)->Encode("world")->ids, ElementsAre(2, 4, 3));
  Write("tokenizer.json", TokenizerJson());
  auto from_json = Tokenizer::LoadFolder(dir_);
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  EXPECT_THAT((*from_json)->Encode("world")->ids, ElementsAre(2, Id("world"), 3));
}

}  // namespace
}  // namespace sluice::text
