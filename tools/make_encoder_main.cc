// sluice-make-encoder: writes a deterministic BERT checkpoint folder in Hugging Face's layout
// (see encoder_generator.h): the bundled `embedder` model, or a BERT-base-shape model for
// benchmarks.
//
//   sluice-make-encoder --out models/embedder/1
//   sluice-make-encoder --vocab 30522 --hidden 768 --layers 12 --heads 12 --intermediate 3072 \
//       --positions 512 --out /tmp/bert_base/1
//
// Exit status: 0 written, 1 error (printed on stderr), 2 usage error.

#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "tools/encoder_generator.h"

namespace sluice::tools {
namespace {

int Main(int argc, char** argv) {
  CLI::App app{
      "Writes a deterministic BERT checkpoint folder (config.json, model.safetensors, "
      "sentence-transformers pooling) in Hugging Face's layout."};
  EncoderCheckpointOptions options;
  std::string dtype = "F32";
  bool no_sentence_transformers = false;
  std::string out;
  app.add_option("--vocab", options.vocab_size, "vocab_size")->capture_default_str();
  app.add_option("--hidden", options.hidden_size, "hidden_size")->capture_default_str();
  app.add_option("--layers", options.layers, "num_hidden_layers")->capture_default_str();
  app.add_option("--heads", options.heads, "num_attention_heads")->capture_default_str();
  app.add_option("--intermediate", options.intermediate_size, "intermediate_size")
      ->capture_default_str();
  app.add_option("--positions", options.max_position_embeddings, "max_position_embeddings")
      ->capture_default_str();
  app.add_option("--seed", options.seed, "seed of the splitmix64 stream")->capture_default_str();
  app.add_option("--scale", options.scale, "half-width of the uniform weight draw")
      ->capture_default_str();
  app.add_option("--dtype", dtype, "storage type of the weights")
      ->check(CLI::IsMember({"F32", "F16", "BF16"}))
      ->capture_default_str();
  app.add_flag("--no-sentence-transformers", no_sentence_transformers,
               "write no modules.json / 1_Pooling (embedding = the CLS token)");
  app.add_option("--out", out, "the folder to write (created if missing)")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : 2;
  }
  options.dtype = dtype == "F16"    ? engine::DataType::kFp16
                  : dtype == "BF16" ? engine::DataType::kBf16
                                    : engine::DataType::kFp32;
  options.sentence_transformers = !no_sentence_transformers;
  if (absl::Status written = WriteEncoderCheckpoint(options, out); !written.ok()) {
    std::cerr << "error: " << written.message() << "\n";
    return 1;
  }
  std::cout << "wrote " << out << "\n";
  return 0;
}

}  // namespace
}  // namespace sluice::tools

int main(int argc, char** argv) { return sluice::tools::Main(argc, argv); }
