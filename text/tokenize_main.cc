// sluice-tokenize: tokenizes JSON lines from stdin with sluice's tokenizer and prints one JSON
// line per input: {"ids": [...], "type_ids": [...]} or {"error": "..."}. Each input line is
// {"text": "..."} or {"text": "...", "pair": "..."}. The reference test (text_reference_test.py)
// compares its output with Hugging Face's `tokenizers`; the benchmark reads the same files.
//
//   sluice-tokenize --tokenizer=DIR_OR_FILE [--config=tokenizer_config.json] [--max_length=N]
//                   [--truncation=auto|on|off] < texts.jsonl > ids.jsonl
//
// --tokenizer is a tokenizer.json, a vocab.txt (with --config for its tokenizer_config.json), or
// a Hugging Face folder (tokenizer.json, else vocab.txt + tokenizer_config.json).

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "nlohmann/json.hpp"
#include "text/tokenizer.h"

ABSL_FLAG(std::string, tokenizer, "", "tokenizer.json, vocab.txt or a Hugging Face folder");
ABSL_FLAG(std::string, config, "", "tokenizer_config.json for a vocab.txt (optional)");
ABSL_FLAG(int, max_length, 0, "length limit in tokens, special tokens included (0: tokenizer's)");
ABSL_FLAG(std::string, truncation, "auto", "auto (as tokenizer.json says), on or off");
ABSL_FLAG(bool, offsets, false,
          "also print each token's byte offsets in its text ([start, stop], null for a special "
          "token or an unknown offset)");

namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("tokenizes JSON lines from stdin (see the source's header)");
  absl::ParseCommandLine(argc, argv);
  const std::string path = absl::GetFlag(FLAGS_tokenizer);
  sluice::text::TokenizerOptions options;
  options.max_length = absl::GetFlag(FLAGS_max_length);
  const std::string truncation = absl::GetFlag(FLAGS_truncation);
  if (truncation == "on") {
    options.truncation = sluice::text::TruncationMode::kTruncate;
  } else if (truncation == "off") {
    options.truncation = sluice::text::TruncationMode::kReject;
  } else if (truncation != "auto") {
    std::fprintf(stderr, "sluice-tokenize: --truncation must be auto, on or off\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<sluice::text::Tokenizer>> tokenizer;
  if (absl::EndsWith(path, ".json")) {
    tokenizer = sluice::text::Tokenizer::LoadJson(path, options);
  } else if (absl::EndsWith(path, ".txt")) {
    const std::string config = absl::GetFlag(FLAGS_config);
    tokenizer = sluice::text::Tokenizer::FromVocab(ReadAll(path),
                                                   config.empty() ? "" : ReadAll(config), options);
  } else {
    tokenizer = sluice::text::Tokenizer::LoadFolder(path, options);
  }
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "sluice-tokenize: %s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  sluice::text::EncodeOptions encode_options;
  encode_options.with_offsets = absl::GetFlag(FLAGS_offsets);
  std::string line;
  std::string out;
  while (std::getline(std::cin, line)) {
    nlohmann::json input = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!input.is_object() || !input.contains("text") || !input["text"].is_string()) {
      std::fprintf(stderr, "sluice-tokenize: not a {\"text\": ...} line: %s\n", line.c_str());
      return 1;
    }
    const std::string text = input["text"].get<std::string>();
    absl::StatusOr<sluice::text::Encoding> encoding =
        input.contains("pair") && input["pair"].is_string()
            ? (*tokenizer)->EncodePair(text, input["pair"].get<std::string>(), encode_options)
            : (*tokenizer)->Encode(text, encode_options);
    nlohmann::json result;
    if (encoding.ok()) {
      result["ids"] = encoding->ids;
      result["type_ids"] = encoding->type_ids;
      if (encode_options.with_offsets) {
        nlohmann::json offsets = nlohmann::json::array();
        for (const sluice::text::TokenOffsets& at : encoding->offsets) {
          offsets.push_back(at.known() ? nlohmann::json::array({at.start, at.stop})
                                       : nlohmann::json());
        }
        result["offsets"] = std::move(offsets);
      }
    } else {
      result["error"] = std::string(encoding.status().message());
    }
    out = result.dump();
    out.push_back('\n');
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return 0;
}
