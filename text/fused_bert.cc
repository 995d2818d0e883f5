// The fused BERT pipeline (BertNormalizer, BertPreTokenizer, WordPiece) in one pass per text:
// the Tokenizer's fast path for the files it fits (tokenizer.cc decides), exact to `tokenizers`
// and benchmarked (docs/performance.md).

#include <algorithm>

#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace sluice::text {

// The pipeline, one character at a time: normalize (clean, isolate Chinese characters, NFD and
// drop nonspacing marks, lowercase), pre-tokenize (whitespace ends a word, punctuation is a word
// of its own), and WordPiece each finished word. `tokenizers` runs these as passes over the whole
// string; all of them map one character at a time except NFD's canonical reordering, which the
// pending buffer does for each run of combining marks, so the result is the same.
//
// With offsets asked for, each character that reaches the word carries the bytes of the input
// character it came from (`tokenizers`' alignments: a decomposed or lowercased character maps to
// its whole source character), and a token spans its first character's start to its last's end.
void Tokenizer::Impl::EncodeSegment(absl::string_view segment, size_t base, Scratch& scratch,
                                    std::vector<int32_t>* ids) const {
  const auto* s = reinterpret_cast<const unsigned char*>(segment.data());
  const size_t n = segment.size();
  for (size_t i = 0; i < n;) {
    const size_t char_start = i;
    char32_t c;
    if (s[i] < 0x80) {
      c = s[i];
      ++i;
    } else {
      i += unicode::DecodeUtf8(s + i, n - i, &c);  // validated by EncodeSequence
    }
    if (scratch.offsets != nullptr) {
      scratch.current = {static_cast<uint32_t>(base + char_start), static_cast<uint32_t>(base + i)};
    }
    const uint8_t flags = char_flags[c];
    if (normalizer.clean_text) {
      if (flags & unicode::kRemovedByCleanText) {
        continue;
      }
      if (flags & unicode::kWhitespace) {
        c = ' ';
      }
    }
    if (normalizer.handle_chinese_chars && (flags & unicode::kChinese)) {
      EmitNormalized(' ', scratch, ids);
      EmitNormalized(c, scratch, ids);
      EmitNormalized(' ', scratch, ids);
      continue;
    }
    EmitNormalized(c, scratch, ids);
  }
  FlushPending(scratch, ids);
  EndWord(scratch, ids);
}

// After cleaning: accent stripping (NFD, then no Mn) and lowercasing.
void Tokenizer::Impl::EmitNormalized(char32_t c, Scratch& scratch,
                                     std::vector<int32_t>* ids) const {
  if (!normalizer.strip_accents) {
    EmitCased(c, scratch, ids);
    return;
  }
  char32_t decomposed[unicode::kMaxDecomposition];
  int count = 1;
  decomposed[0] = c;
  if (c >= 0x80 && (char_flags[c] & unicode::kDecomposes)) {
    count = unicode::Decompose(c, decomposed);
  }
  for (int k = 0; k < count; ++k) {
    const char32_t d = decomposed[k];
    if (d >= 0x80 && (char_flags[d] & unicode::kCombining)) {
      // Reordered by class when the run ends.
      scratch.pending.push_back({d, scratch.current, /*consumes=*/k == 0});
      continue;
    }
    FlushPending(scratch, ids);
    if (k == 0) {
      scratch.last_consumed = scratch.current;
    }
    if (d >= 0x80 && (char_flags[d] & unicode::kNonspacingMark)) {
      continue;
    }
    EmitCased(d, scratch, ids);
  }
}

// The end of a run of combining marks: NFD's canonical ordering (a stable sort by combining
// class), then the marks that are not Mn go on.
//
// Offsets: `tokenizers` aligns NFD's output by position, not by character: after the sort, the
// k-th mark that stands for an input character gets the k-th such input character of the run
// (in input order), and a mark a decomposition added gets the last one before it.
void Tokenizer::Impl::FlushPending(Scratch& scratch, std::vector<int32_t>* ids) const {
  if (scratch.pending.empty()) {
    return;
  }
  auto& pending = scratch.pending;
  const bool track = scratch.offsets != nullptr;
  if (track) {
    scratch.run_sources.clear();
    for (const Mark& mark : pending) {
      if (mark.consumes) {
        scratch.run_sources.push_back(mark.source);
      }
    }
  }
  if (pending.size() > 1) {
    std::stable_sort(pending.begin(), pending.end(), [](const Mark& a, const Mark& b) {
      return unicode::CombiningClass(a.c) < unicode::CombiningClass(b.c);
    });
  }
  const Source current = scratch.current;
  size_t next = 0;
  for (const Mark& mark : pending) {
    if (track) {
      if (mark.consumes) {
        scratch.last_consumed = scratch.run_sources[next++];
      }
      scratch.current = scratch.last_consumed;
    }
    if (!(char_flags[mark.c] & unicode::kNonspacingMark)) {
      EmitCased(mark.c, scratch, ids);
    }
  }
  scratch.current = current;
  pending.clear();
}

void Tokenizer::Impl::EmitCased(char32_t c, Scratch& scratch, std::vector<int32_t>* ids) const {
  if (!normalizer.lowercase) {
    PreTokenize(c, scratch, ids);
    return;
  }
  if (c < 0x80) {
    PreTokenize((c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c, scratch, ids);
    return;
  }
  if (!(char_flags[c] & unicode::kChangesWhenLowercased)) {
    PreTokenize(c, scratch, ids);
    return;
  }
  char32_t lower[unicode::kMaxLowercase];
  const int count = unicode::ToLower(c, lower);
  for (int k = 0; k < count; ++k) {
    PreTokenize(lower[k], scratch, ids);
  }
}

void Tokenizer::Impl::PreTokenize(char32_t c, Scratch& scratch, std::vector<int32_t>* ids) const {
  if (bert_pre_tokenizer) {
    const uint8_t flags = char_flags[c];
    if (flags & unicode::kWhitespace) {
      EndWord(scratch, ids);
      return;
    }
    if (flags & unicode::kPunctuation) {
      EndWord(scratch, ids);
      unicode::AppendUtf8(c, &scratch.word);
      scratch.ends.push_back(static_cast<uint32_t>(scratch.word.size()));
      if (scratch.offsets != nullptr) scratch.sources.push_back(scratch.current);
      EndWord(scratch, ids);
      return;
    }
  }
  unicode::AppendUtf8(c, &scratch.word);
  scratch.ends.push_back(static_cast<uint32_t>(scratch.word.size()));
  if (scratch.offsets != nullptr) scratch.sources.push_back(scratch.current);
}

void Tokenizer::Impl::EndWord(Scratch& scratch, std::vector<int32_t>* ids) const {
  if (scratch.word.empty()) {
    return;
  }
  WordPiece(scratch, ids);
  scratch.word.clear();
  scratch.ends.clear();
  scratch.sources.clear();
}

// Greedy longest-match-first, as `tokenizers`' WordPiece: the longest vocabulary entry that
// starts the rest of the word (with the continuing prefix after the first piece); a word that
// cannot be covered, or is longer than max_input_chars_per_word characters, is one unknown token.
void Tokenizer::Impl::WordPiece(Scratch& scratch, std::vector<int32_t>* ids) const {
  const absl::string_view word = scratch.word;
  const std::vector<uint32_t>& ends = scratch.ends;
  std::vector<TokenOffsets>* offsets = scratch.offsets;
  const std::vector<Source>& sources = scratch.sources;
  auto whole_word_unknown = [&] {
    ids->push_back(unk_id);
    if (offsets != nullptr) offsets->push_back({sources.front().start, sources.back().end});
  };
  if (ends.size() > max_input_chars_per_word) {
    whole_word_unknown();
    return;
  }
  const size_t mark = ids->size();
  const size_t mark_offsets = offsets != nullptr ? offsets->size() : 0;
  const size_t prefix = continuing_prefix.size();
  size_t start = 0;
  size_t first_char = 0;  // index in `ends` of the first character after `start`
  while (start < word.size()) {
    absl::string_view candidate_base;
    size_t extra = 0;
    if (start == 0) {
      candidate_base = word;
    } else {
      scratch.piece.assign(continuing_prefix);
      scratch.piece.append(word.data() + start, word.size() - start);
      candidate_base = scratch.piece;
      extra = prefix;
    }
    int32_t found = -1;
    size_t k = ends.size();
    while (k > first_char) {
      --k;
      const size_t length = extra + (ends[k] - start);
      if (length > max_token_bytes) {
        continue;
      }
      found = Lookup(candidate_base.substr(0, length));
      if (found >= 0) {
        break;
      }
    }
    if (found < 0) {
      ids->resize(mark);
      if (offsets != nullptr) offsets->resize(mark_offsets);
      whole_word_unknown();
      return;
    }
    ids->push_back(found);
    if (offsets != nullptr) offsets->push_back({sources[first_char].start, sources[k].end});
    start = ends[k];
    first_char = k + 1;
  }
}

}  // namespace sluice::text
