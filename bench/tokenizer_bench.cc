// sluice-tokenizer-bench: sluice's tokenizer on one thread over a corpus of JSON lines
// ({"text": ...} or {"text": ..., "pair": ...}, text/make_corpus.py). Loads everything first,
// then times --passes passes of Encode/EncodePair over all of it and prints one JSON line:
// {"inputs": N, "tokens": T, "seconds": S, "cpu_seconds": C, "tokens_per_s": T/S} (the fastest
// pass by wall-clock time and, separately, by process CPU time).
// bench/tokenizer_bench.py runs it alternately with Hugging Face's `tokenizers`.
//
//   sluice-tokenizer-bench --tokenizer=tokenizer.json --corpus=corpus.jsonl [--passes=3]

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "nlohmann/json.hpp"
#include "text/tokenizer.h"

ABSL_FLAG(std::string, tokenizer, "", "tokenizer.json (its truncation block applies)");
ABSL_FLAG(std::string, corpus, "", "JSON lines: {\"text\": ...} or {\"text\": ..., \"pair\": ...}");
ABSL_FLAG(int, passes, 3, "timed passes over the corpus (the fastest is reported)");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  auto tokenizer = sluice::text::Tokenizer::LoadJson(absl::GetFlag(FLAGS_tokenizer));
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  struct Input {
    std::string text;
    std::string pair;
    bool is_pair = false;
  };
  std::vector<Input> inputs;
  std::ifstream in(absl::GetFlag(FLAGS_corpus));
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    Input input{j["text"].get<std::string>(), "", j.contains("pair")};
    if (input.is_pair) {
      input.pair = j["pair"].get<std::string>();
    }
    inputs.push_back(std::move(input));
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "no inputs in --corpus\n");
    return 1;
  }
  // The character table is built on first use: do that outside the timing, as loading is.
  (void)(*tokenizer)->Encode("warm up");
  double best = 1e300;
  double best_cpu = 1e300;
  size_t tokens = 0;
  for (int pass = 0; pass < absl::GetFlag(FLAGS_passes); ++pass) {
    size_t pass_tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    for (const Input& input : inputs) {
      auto encoding = input.is_pair ? (*tokenizer)->EncodePair(input.text, input.pair)
                                    : (*tokenizer)->Encode(input.text);
      if (!encoding.ok()) {
        std::fprintf(stderr, "%s\n", encoding.status().ToString().c_str());
        return 1;
      }
      pass_tokens += encoding->ids.size();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, seconds);
    best_cpu = std::min(best_cpu, static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC);
    tokens = pass_tokens;
  }
  std::printf(
      "{\"inputs\": %zu, \"tokens\": %zu, \"seconds\": %.6f, \"cpu_seconds\": %.6f, "
      "\"tokens_per_s\": %.1f}\n",
      inputs.size(), tokens, best, best_cpu, tokens / best);
  return 0;
}
