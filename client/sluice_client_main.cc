// sluice-client: a command-line KServe v2 gRPC client (health, models, metadata, config, infer,
// stats, load, unload). Exit status: 0 success, 1 error (printed as "error: ..." on stderr),
// 2 usage error.

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/inference_client.h"
#include "client/random_input.h"
#include "client/tensor_codec.h"
#include "client/tensor_json.h"
#include "client/tls_flags.h"
#include "common/status_macros.h"
#include "google/protobuf/text_format.h"
#include "nlohmann/json.hpp"

namespace sluice::client {
namespace {

using json = nlohmann::ordered_json;

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

struct GlobalFlags {
  std::string url = "localhost:8001";
  int64_t timeout_ms = 60'000;
  TlsOptions tls;
};

struct InferFlags {
  std::string model;
  std::string version;
  std::string id;
  std::string input_json;
  bool random = false;
  std::string sequence_length = "1";
  int64_t vocab_size = kDefaultTokenIdLimit;
  int64_t batch = 1;
  uint64_t seed = 0;
  std::vector<std::string> outputs;
  bool pretty = false;
  // --text / --text-pair: one batch item each (an encoder model with a tokenizer).
  std::vector<std::string> text;
  std::vector<std::string> text_pair;
};

absl::StatusOr<std::unique_ptr<InferenceClient>> Connect(const GlobalFlags& flags) {
  ClientOptions options;
  options.timeout_ms = flags.timeout_ms;
  options.tls = flags.tls;
  return InferenceClient::Create(flags.url, options);
}

absl::StatusOr<std::string> ReadInput(const std::string& path) {
  if (path == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return text.str();
}

// `health`: exit 0 only if the server is live and ready.
absl::StatusOr<int> RunHealth(InferenceClient& client) {
  ASSIGN_OR_RETURN(bool live, client.ServerLive());
  ASSIGN_OR_RETURN(bool ready, client.ServerReady());
  std::cout << "live: " << (live ? "true" : "false") << "\nready: " << (ready ? "true" : "false")
            << "\n";
  return live && ready ? kExitOk : kExitError;
}

// `models`: the repository index as a table.
absl::StatusOr<int> RunModels(InferenceClient& client) {
  ASSIGN_OR_RETURN(inference::RepositoryIndexResponse index, client.RepositoryIndex());
  size_t name_width = 4, version_width = 7, state_width = 5;
  for (const auto& model : index.models()) {
    name_width = std::max(name_width, model.name().size());
    version_width = std::max(version_width, model.version().size());
    state_width = std::max(state_width, model.state().size());
  }
  auto row = [&](absl::string_view name, absl::string_view version, absl::string_view state,
                 absl::string_view reason) {
    std::cout << absl::StrFormat("%-*s  %-*s  %-*s  %s", name_width, name, version_width, version,
                                 state_width, state, reason)
              << "\n";
  };
  row("NAME", "VERSION", "STATE", "REASON");
  for (const auto& model : index.models()) {
    row(model.name(), model.version(), model.state(), model.reason());
  }
  return kExitOk;
}

json TensorMetadataToJson(const inference::ModelMetadataResponse::TensorMetadata& tensor) {
  return json{{"name", tensor.name()},
              {"datatype", tensor.datatype()},
              {"shape", std::vector<int64_t>(tensor.shape().begin(), tensor.shape().end())}};
}

// `metadata MODEL`: the model's metadata as JSON (shapes as numbers, unlike proto3 JSON).
absl::StatusOr<int> RunMetadata(InferenceClient& client, const std::string& model,
                                const std::string& version) {
  ASSIGN_OR_RETURN(inference::ModelMetadataResponse metadata, client.ModelMetadata(model, version));
  // Indented JSON, but one line per tensor: nlohmann's indent would put every dimension on its
  // own line.
  const auto dump = [](const json& value) {
    return value.dump(-1, ' ', false, json::error_handler_t::replace);
  };
  auto tensors = [&dump](const auto& list) {
    std::vector<std::string> lines;
    for (const auto& tensor : list) lines.push_back("    " + dump(TensorMetadataToJson(tensor)));
    return lines.empty() ? std::string("[]")
                         : absl::StrCat("[\n", absl::StrJoin(lines, ",\n"), "\n  ]");
  };
  std::cout << "{\n  \"name\": " << dump(metadata.name()) << ",\n  \"versions\": "
            << dump(
                   std::vector<std::string>(metadata.versions().begin(), metadata.versions().end()))
            << ",\n  \"platform\": " << dump(metadata.platform())
            << ",\n  \"inputs\": " << tensors(metadata.inputs())
            << ",\n  \"outputs\": " << tensors(metadata.outputs()) << "\n}\n";
  return kExitOk;
}

// `config MODEL`: the model configuration in protobuf text format (as config.pbtxt).
absl::StatusOr<int> RunConfig(InferenceClient& client, const std::string& model,
                              const std::string& version) {
  ASSIGN_OR_RETURN(inference::ModelConfig config, client.ModelConfig(model, version));
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(config, &text)) {
    return absl::InternalError("cannot print the model config as text");
  }
  std::cout << text;
  return kExitOk;
}

// `infer MODEL`: one inference from JSON or random inputs; prints the outputs as JSON.
absl::StatusOr<int> RunInfer(InferenceClient& client, const InferFlags& flags) {
  std::string json_text;  // Read before any RPC, so a bad path fails fast.
  if (!flags.text.empty()) {
    // Text for an encoder with a tokenizer: `text` (and `text_pair`) BYTES [n, 1].
    if (!flags.text_pair.empty() && flags.text_pair.size() != flags.text.size()) {
      return absl::InvalidArgumentError(absl::StrCat("--text-pair given ", flags.text_pair.size(),
                                                     " times, --text ", flags.text.size(),
                                                     " times: one second text per first text"));
    }
    inference::ModelInferRequest request;
    const int64_t n = static_cast<int64_t>(flags.text.size());
    RETURN_IF_ERROR(AddBytesInput(request, "text", {n, 1}, flags.text));
    if (!flags.text_pair.empty()) {
      RETURN_IF_ERROR(AddBytesInput(request, "text_pair", {n, 1}, flags.text_pair));
    }
    request.set_model_name(flags.model);
    request.set_model_version(flags.version);
    if (!flags.id.empty()) request.set_id(flags.id);
    for (const std::string& output : flags.outputs) AddRequestedOutput(request, output);
    ASSIGN_OR_RETURN(inference::ModelInferResponse response, client.Infer(request));
    ASSIGN_OR_RETURN(std::string text, ResponseToJson(response, flags.pretty ? 2 : -1));
    std::cout << text << "\n";
    return kExitOk;
  }
  if (!flags.random) {
    ASSIGN_OR_RETURN(json_text, ReadInput(flags.input_json));
  }
  ASSIGN_OR_RETURN(inference::ModelMetadataResponse metadata,
                   client.ModelMetadata(flags.model, flags.version));
  inference::ModelInferRequest request;
  if (flags.random) {
    // A range draws the request's one length from the seed (as sluice-loadtest's request 0).
    absl::StatusOr<LengthRange> lengths = ParseLengthRange(flags.sequence_length, int64_t{1} << 20);
    if (!lengths.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--seq-len: ", lengths.status().message()));
    }
    ASSIGN_OR_RETURN(request,
                     MakeRandomRequest(metadata, flags.batch, flags.seed,
                                       DrawLength(*lengths, flags.seed, 0), flags.vocab_size));
  } else {
    ASSIGN_OR_RETURN(request, InputsFromJson(json_text, &metadata));
  }
  request.set_model_name(flags.model);
  request.set_model_version(flags.version);
  if (!flags.id.empty()) request.set_id(flags.id);
  for (const std::string& output : flags.outputs) AddRequestedOutput(request, output);
  ASSIGN_OR_RETURN(inference::ModelInferResponse response, client.Infer(request));
  ASSIGN_OR_RETURN(std::string text, ResponseToJson(response, flags.pretty ? 2 : -1));
  std::cout << text << "\n";
  return kExitOk;
}

// `stats [MODEL]`: per model version counts and average durations.
absl::StatusOr<int> RunStats(InferenceClient& client, const std::string& model,
                             const std::string& version) {
  ASSIGN_OR_RETURN(inference::ModelStatisticsResponse stats,
                   client.ModelStatistics(model, version));
  auto line = [](absl::string_view what, const inference::StatisticDuration& d) {
    const double average_us = d.count() == 0 ? 0.0 : d.ns() / 1e3 / d.count();
    std::cout << absl::StrFormat("  %-15s count=%-12d avg_us=%.1f\n", what, d.count(), average_us);
  };
  if (stats.model_stats().empty()) std::cout << "no statistics\n";
  for (const auto& model_stats : stats.model_stats()) {
    const auto& s = model_stats.inference_stats();
    std::cout << absl::StrFormat("%s (version %s): inference_count=%d execution_count=%d\n",
                                 model_stats.name(),
                                 model_stats.version().empty() ? "-" : model_stats.version(),
                                 model_stats.inference_count(), model_stats.execution_count());
    line("success", s.success());
    line("fail", s.fail());
    line("queue", s.queue());
    line("compute_input", s.compute_input());
    line("compute_infer", s.compute_infer());
    line("compute_output", s.compute_output());
  }
  return kExitOk;
}

int Main(int argc, char** argv) {
  CLI::App app{
      "sluice-client: talk to a sluice (or any KServe v2 / Triton) inference server over gRPC."};
  app.require_subcommand(1);
  app.fallthrough();  // Global flags are accepted after the subcommand too.
  app.footer(
      "Examples:\n"
      "  sluice-client health\n"
      "  sluice-client --url sluice:8001 models\n"
      "  sluice-client infer simple --random\n"
      "  sluice-client infer mlp --random --batch 8 --output OUTPUT0\n"
      "  sluice-client infer embedder --random --batch 2 --seq-len 16 --output embedding\n"
      "  sluice-client infer simple --input-json request.json\n"
      "  sluice-client infer embedder --text \"a sentence\" --text \"another\" --output embedding\n"
      "  sluice-client infer reranker --text \"a query\" --text-pair \"a passage\"\n"
      "Exit status: 0 success, 1 error, 2 usage error.");

  GlobalFlags global;
  app.add_option("--url", global.url, "Server gRPC address, host:port")
      ->envname("SLUICE_URL")
      ->capture_default_str();
  app.add_option("--timeout-ms", global.timeout_ms, "Deadline of each RPC in ms (0 = none)")
      ->envname("SLUICE_TIMEOUT_MS")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  AddTlsFlags(app, global.tls);

  CLI::App* health = app.add_subcommand(
      "health", "Print whether the server is live and ready; exit 0 only if both");
  CLI::App* models =
      app.add_subcommand("models", "List the repository's models: name, version, state, reason");

  std::string model, version;
  CLI::App* metadata = app.add_subcommand("metadata", "Print a model's metadata as JSON");
  metadata->add_option("model", model, "Model name")->required();
  metadata->add_option("--version", version, "Model version (default: the server's choice)");

  CLI::App* config =
      app.add_subcommand("config", "Print a model's configuration in protobuf text format");
  config->add_option("model", model, "Model name")->required();
  config->add_option("--version", version, "Model version (default: the server's choice)");

  InferFlags infer_flags;
  CLI::App* infer = app.add_subcommand("infer", "Run one inference and print the outputs as JSON");
  infer->add_option("model", infer_flags.model, "Model name")->required();
  CLI::Option* input_json = infer->add_option(
      "--input-json", infer_flags.input_json,
      "Inputs as JSON ('-' = stdin): {\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"INT32\","
      "\"shape\":[1,16],\"data\":[...]}]}; datatype and shape may be left out when the model's "
      "metadata fixes them");
  CLI::Option* random =
      infer->add_flag("--random", infer_flags.random,
                      "Random inputs shaped from the model's metadata (-1 dimensions become 1)");
  infer
      ->add_option("--batch", infer_flags.batch,
                   "With --random: batch size, for a model whose input shapes start with -1")
      ->check(CLI::PositiveNumber)
      ->needs(random)
      ->capture_default_str();
  infer
      ->add_option("--seq-len", infer_flags.sequence_length,
                   "With --random: the length of every other -1 dimension (a sequence model's "
                   "tokens; attention_mask is then all ones, token_type_ids zeros); N, or "
                   "MIN:MAX for one length drawn uniformly from that range by --seed")
      ->needs(random)
      ->capture_default_str();
  infer
      ->add_option("--vocab-size", infer_flags.vocab_size,
                   "With --random: input_ids are drawn uniformly from [0, N) (the model's "
                   "vocab_size covers its vocabulary; the default is inside any)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31))
      ->needs(random)
      ->capture_default_str();
  infer->add_option("--seed", infer_flags.seed, "With --random: generator seed")
      ->needs(random)
      ->capture_default_str();
  CLI::Option* text = infer->add_option(
      "--text", infer_flags.text,
      "Text input (repeatable: one batch item each) for an encoder model with a tokenizer; the "
      "server tokenizes it (input 'text', BYTES [n, 1])");
  infer
      ->add_option("--text-pair", infer_flags.text_pair,
                   "With --text: the second text of each pair (cross-encoders; input "
                   "'text_pair'), given as often as --text")
      ->needs(text);
  input_json->excludes(random);
  text->excludes(random)->excludes(input_json);
  infer
      ->add_option("--output", infer_flags.outputs,
                   "Output to return (repeatable; default: all outputs)")
      ->allow_extra_args(false);
  infer->add_option("--version", infer_flags.version,
                    "Model version (default: the server's choice)");
  infer->add_option("--id", infer_flags.id, "Request id, echoed in the response");
  infer->add_flag("--pretty", infer_flags.pretty, "Indent the JSON output");

  CLI::App* stats = app.add_subcommand(
      "stats", "Print inference statistics per model version (all models if MODEL is omitted)");
  stats->add_option("model", model, "Model name");
  stats->add_option("--version", version, "Model version (default: all versions)");

  CLI::App* load = app.add_subcommand(
      "load", "Load (or reload) a model; needs a server with --model-control-mode=explicit");
  load->add_option("model", model, "Model name")->required();
  CLI::App* unload = app.add_subcommand(
      "unload", "Unload a model; needs a server with --model-control-mode=explicit");
  unload->add_option("model", model, "Model name")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 reports through exceptions; --help is one too (exit code 0).
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  if (*infer && !infer_flags.random && infer_flags.input_json.empty() && infer_flags.text.empty()) {
    std::cerr << "error: infer needs --input-json FILE, --random or --text\n"
              << "Run with --help for more information.\n";
    return kExitUsage;
  }

  absl::StatusOr<int> result = [&]() -> absl::StatusOr<int> {
    ASSIGN_OR_RETURN(std::unique_ptr<InferenceClient> client, Connect(global));
    InferenceClient& c = *client;
    if (*health) return RunHealth(c);
    if (*models) return RunModels(c);
    if (*metadata) return RunMetadata(c, model, version);
    if (*config) return RunConfig(c, model, version);
    if (*infer) return RunInfer(c, infer_flags);
    if (*stats) return RunStats(c, model, version);
    if (*load) {
      RETURN_IF_ERROR(c.LoadModel(model));
      std::cout << "loaded " << model << "\n";
      return kExitOk;
    }
    if (*unload) {
      RETURN_IF_ERROR(c.UnloadModel(model));
      std::cout << "unloaded " << model << "\n";
      return kExitOk;
    }
    return absl::InternalError("no subcommand ran");  // require_subcommand(1) prevents this.
  }();
  std::cout.flush();
  if (!result.ok()) {
    std::cerr << "error: " << result.status().message() << "\n";
    return kExitError;
  }
  return *result;
}

}  // namespace
}  // namespace sluice::client

int main(int argc, char** argv) { return sluice::client::Main(argc, argv); }
