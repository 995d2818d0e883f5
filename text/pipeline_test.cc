// The general pipeline (pipeline.h): load errors of every kind, naming the component's path;
// BPE's cost on long words and large vocabularies; a few behaviours checked by hand (the
// reference tests check everything against `tokenizers`).

#include <time.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "text/tokenizer.h"

namespace sluice::text {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A byte-free BPE over a..e: merges "a b" -> ab, "ab c" -> abc.
std::string BpeJson(const std::string& normalizer = "null",
                    const std::string& pre_tokenizer = "null",
                    const std::string& merges = R"(["a b", "ab c"])",
                    const std::string& model_extra = "", const std::string& post = "null") {
  return absl::StrCat(R"({"version": "1.0", "added_tokens": [], "normalizer": )", normalizer,
                      R"(, "pre_tokenizer": )", pre_tokenizer, R"(, "post_processor": )", post,
                      R"(, "model": {"type": "BPE", "unk_token": "<unk>", )", model_extra,
                      R"("vocab": {"<unk>": 0, "a": 1, "b": 2, "c": 3, "d": 4, "ab": 5, "abc": 6,
                                   "▁": 7, "e": 8},
                         "merges": )",
                      merges, "}}");
}

std::string LoadError(const std::string& json) {
  auto tokenizer = Tokenizer::FromJson(json);
  EXPECT_FALSE(tokenizer.ok());
  if (tokenizer.ok()) {
    return "";
  }
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(tokenizer.status().message());
}

TEST(PipelineLoadTest, UnknownComponentsNameTheirPath) {
  EXPECT_THAT(LoadError(BpeJson("null", R"({"type": "Sequence", "pretokenizers": [
                  {"type": "Whitespace"}, {"type": "Foo"}]})")),
              HasSubstr("tokenizer.json: pre_tokenizer.pretokenizers[1]: type 'Foo' is not "
                        "supported"));
  EXPECT_THAT(LoadError(BpeJson(R"({"type": "Sequence", "normalizers": [{"type": "NFC"},
                  {"type": "Sequence", "normalizers": [{"type": "Bar"}]}]})")),
              HasSubstr("normalizer.normalizers[1].normalizers[0]: type 'Bar' is not supported"));
  EXPECT_THAT(LoadError(BpeJson("null", "null", R"(["a b"])", "", R"({"type": "Sequence",
                  "processors": [{"type": "ByteLevel"}, {"type": "Baz"}]})")),
              HasSubstr("post_processor.processors[1]: type 'Baz' is not supported"));
  EXPECT_THAT(LoadError(BpeJson("null", R"({"type": "Split", "pattern": {"String": " "},
                  "behavior": "Sideways", "invert": false})")),
              HasSubstr("pre_tokenizer: behavior 'Sideways' is not known"));
  EXPECT_THAT(LoadError(BpeJson("null", R"({"type": "Metaspace", "replacement": "ab"})")),
              HasSubstr("pre_tokenizer: 'replacement' is not one character"));
  EXPECT_THAT(LoadError(BpeJson("null", R"({"type": "Metaspace", "prepend_scheme": "twice"})")),
              HasSubstr("prepend_scheme 'twice' is not known"));
}

TEST(PipelineLoadTest, MalformedMergesAndVocabularies) {
  EXPECT_THAT(LoadError(BpeJson("null", "null", R"(["a b", "abc"])")),
              HasSubstr("model.merges[1]: merge 'abc' is not two tokens"));
  EXPECT_THAT(LoadError(BpeJson("null", "null", R"(["a b", ["a", "x"]])")),
              HasSubstr("model.merges[1]: merge token 'x' is not in the vocabulary"));
  EXPECT_THAT(LoadError(BpeJson("null", "null", R"(["a b", "c d"])")),
              HasSubstr("model.merges[1]: merged token 'cd' is not in the vocabulary"));
  EXPECT_THAT(LoadError(BpeJson("null", "null", R"(["a b", 7])")),
              HasSubstr("model.merges[1]: is not"));
  EXPECT_THAT(LoadError(BpeJson("null", "null", R"(["a b"])", R"("dropout": 0.1, )")),
              HasSubstr("model: dropout is not supported"));
  EXPECT_THAT(LoadError(R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})"),
              HasSubstr("model.vocab: token 'a' has no valid id"));
  EXPECT_THAT(LoadError(R"({"model": {"type": "Unigram", "unk_id": 5,
                                      "vocab": [["a", -1.0], ["b", -2.0]]}})"),
              HasSubstr("model: unk_id 5 is out of range"));
  EXPECT_THAT(LoadError(R"({"model": {"type": "Unigram", "vocab": [["a", -1.0], ["b"]]}})"),
              HasSubstr("model.vocab[1]: is not [piece, score]"));
}

TEST(PipelineLoadTest, BadRegexesAndCharsmaps) {
  EXPECT_THAT(LoadError(BpeJson(R"({"type": "Replace", "pattern": {"Regex": "(a"},
                                    "content": "b"})")),
              HasSubstr("normalizer.pattern: regex '(a' does not compile"));
  EXPECT_THAT(LoadError(BpeJson("null", R"({"type": "Split", "pattern": {"Regex": "[z-a]"},
                                            "behavior": "Isolated", "invert": false})")),
              HasSubstr("pre_tokenizer.pattern: regex '[z-a]' does not compile"));
  EXPECT_THAT(LoadError(BpeJson(R"({"type": "Precompiled", "precompiled_charsmap": "!!"})")),
              HasSubstr("normalizer: precompiled_charsmap is not base64"));
  EXPECT_THAT(LoadError(BpeJson(R"({"type": "Precompiled", "precompiled_charsmap": "AAAAAAAA"})")),
              HasSubstr("normalizer: precompiled_charsmap: its trie size is out of range"));
}

TEST(PipelineTest, BpeMergesByRank) {
  auto tokenizer = Tokenizer::FromJson(BpeJson());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_THAT((*tokenizer)->Encode("abcd")->ids, ElementsAre(6, 4));
  EXPECT_THAT((*tokenizer)->Encode("abxab")->ids, ElementsAre(5, 0, 5));  // x is unknown
  auto fused = Tokenizer::FromJson(BpeJson("null", "null", R"(["a b"])", R"("fuse_unk": true, )"));
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_THAT((*fused)->Encode("axyzb")->ids, ElementsAre(1, 0, 2));
  auto invalid = (*tokenizer)->Encode("a\xff");
  EXPECT_EQ(invalid.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(invalid.status().message(), HasSubstr("invalid UTF-8 at byte offset 1"));
}

TEST(PipelineTest, MetaspaceAndRoberta) {
  auto tokenizer = Tokenizer::FromJson(BpeJson(
      "null", R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"})",
      R"(["a b"])", "", R"({"type": "RobertaProcessing", "sep": ["e", 8], "cls": ["d", 4]})"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_THAT((*tokenizer)->Encode("ab c")->ids, ElementsAre(4, 7, 5, 7, 3, 8));
  auto pair = (*tokenizer)->EncodePair("a", "b");
  EXPECT_THAT(pair->ids, ElementsAre(4, 7, 1, 8, 8, 7, 2, 8));
  EXPECT_THAT(pair->type_ids, ElementsAre(0, 0, 0, 0, 0, 0, 0, 0));
}

TEST(PipelineTest, ConcurrentUseGivesTheSameIds) {
  // Regex pre-tokenizer, normalizers and BPE shared by several threads (no locks, no state).
  auto tokenizer = Tokenizer::FromJson(
      BpeJson(R"({"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]})",
              R"({"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed",
          "invert": false})"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::string text = "ABC abcd ＡＢＣ\u3000abab cab";
  const std::vector<int32_t> want = (*tokenizer)->Encode(text)->ids;
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        if ((*tokenizer)->Encode(text)->ids != want) {
          ++mismatches;
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_THAT(want, ElementsAre(6, 6, 4, 6, 5, 5, 3, 5));
}

// CPU time of this thread in milliseconds: the build machines are shared, and wall time under
// load says little about the code.
double ThreadCpuMs() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// Optimised builds only: instrumented (sanitizer) and unoptimised builds are several times
// slower, and the limits are about the algorithms.
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
constexpr bool kTimed = true;
#else
constexpr bool kTimed = false;
#endif

// A byte-level-style BPE with `n` merges over a two-letter alphabet: tokens a, b, then merges
// building runs of each letter (a a -> aa, aa a -> aaa, ...), plus filler entries up to `vocab`.
std::string LargeBpe(int n, int vocab) {
  std::string tokens = R"("a": 0, "b": 1)";
  std::string merges;
  int id = 2;
  for (int length = 2; length <= n / 2 + 1; ++length) {
    for (char c : {'a', 'b'}) {
      absl::StrAppend(&tokens, ", \"", std::string(length, c), "\": ", id++);
      absl::StrAppend(&merges, merges.empty() ? "" : ", ", "\"", std::string(length - 1, c), " ",
                      std::string(1, c), "\"");
    }
  }
  while (id < vocab) {
    absl::StrAppend(&tokens, absl::StrFormat(", \"filler%d\": %d", id, id));
    ++id;
  }
  return absl::StrCat(R"({"model": {"type": "BPE", "vocab": {)", tokens, R"(}, "merges": [)",
                      merges, "]}}");
}

TEST(PipelineTest, LongWordsAreNotQuadratic) {
  // Every merge applies in turn over a 10,000-character word: a quadratic merge loop takes
  // seconds here, the priority queue milliseconds.
  auto tokenizer = Tokenizer::FromJson(LargeBpe(400, 1000));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::string word;
  for (int i = 0; i < 10000; ++i) {
    word += (i / 7) % 2 ? 'a' : 'b';
  }
  word += std::string(3000, 'a');
  const double start = ThreadCpuMs();
  auto encoding = (*tokenizer)->Encode(word);
  const double ms = ThreadCpuMs() - start;
  ASSERT_TRUE(encoding.ok());
  EXPECT_GT(encoding->num_tokens(), 1000);
  RecordProperty("cpu_ms", absl::StrFormat("%.2f", ms));
  std::printf("13,000-character word: %.2f ms CPU\n", ms);
  if (kTimed) {
    EXPECT_LT(ms, 10.0) << "13,000 characters in one word";
  }
}

// 400 single characters and 150,000 merges of two of them (Qwen's size).
std::string QwenSizedBpe() {
  auto ch = [](int i) {
    std::string s;
    const char32_t c = 0x4E00 + i;  // three UTF-8 bytes
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
    return s;
  };
  std::string tokens;
  std::string merges;
  int id = 0;
  for (int i = 0; i < 400; ++i) {
    absl::StrAppend(&tokens, id == 0 ? "" : ", ", "\"", ch(i), "\": ", id);
    ++id;
  }
  for (int i = 0; i < 400 && id < 150400; ++i) {
    for (int j = 0; j < 400 && id < 150400; ++j) {
      absl::StrAppend(&tokens, ", \"", ch(i), ch(j), "\": ", id++);
      absl::StrAppend(&merges, merges.empty() ? "" : ", ", "\"", ch(i), " ", ch(j), "\"");
    }
  }
  return absl::StrCat(R"({"model": {"type": "BPE", "vocab": {)", tokens, R"(}, "merges": [)",
                      merges, "]}}");
}

TEST(PipelineTest, LoadsAQwenSizedVocabularyQuickly) {
  const std::string json = QwenSizedBpe();
  const double start = ThreadCpuMs();
  auto tokenizer = Tokenizer::FromJson(json);
  const double ms = ThreadCpuMs() - start;
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->vocab_size(), 150400);
  std::printf("150,400 entries and 150,000 merges: loaded in %.1f ms CPU\n", ms);
  if (kTimed) {
    EXPECT_LT(ms, 300.0) << "150,000 entries and 150,000 merges";
  }
}

}  // namespace
}  // namespace sluice::text
