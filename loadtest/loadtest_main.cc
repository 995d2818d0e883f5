// sluice-loadtest: measures a model on a KServe v2 gRPC server (sluice, Triton, the echo server)
// under closed-loop (--concurrency) or open-loop (--request-rate) load, and reports throughput,
// client latency percentiles, errors by status code and the server-side breakdown.
//
// Exit status: 0 when every level was measured; 1 on an error (server unreachable, unknown model,
// a test request rejected, every request of a window failed, an output file not written); 2 on a
// usage error; 3 when a --max-requests / --max-duration-s limit cut the run short (the levels
// measured are still reported).

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/inference_client.h"
#include "client/tensor_codec.h"
#include "client/tls_flags.h"
#include "loadtest/http_sender.h"
#include "loadtest/load_runner.h"
#include "loadtest/load_sweep.h"
#include "loadtest/report_writer.h"
#include "loadtest/request_builder.h"
#include "loadtest/shared_memory_setup.h"

namespace sluice::loadtest {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitLimit = 3;

// Most concurrent requests a closed-loop level may keep in flight (sync mode: one thread each).
constexpr int64_t kMaxConcurrency = 4096;
// Longest --seq-len.
constexpr int64_t kMaxSequenceLength = int64_t{1} << 20;

struct Flags {
  std::string model;
  std::string model_version;
  std::string url = "localhost:8001";
  client::TlsOptions tls;
  std::string mode = "async";
  std::string concurrency;
  std::string request_rate;
  std::string arrivals = "constant";
  int64_t max_outstanding = 1024;
  int64_t batch_size = 1;
  std::string sequence_length = "1";
  int64_t vocab_size = client::kDefaultTokenIdLimit;
  std::vector<std::string> shapes;
  std::string input_data = "random";
  std::string text_file;
  uint64_t seed = 0;
  uint64_t priority = 0;
  int64_t warmup_ms = 1000;
  int64_t window_ms = 2000;
  double stability_percent = 10;
  int max_windows = 10;
  int64_t max_requests = 5'000'000;
  int64_t max_duration_s = 300;
  int64_t timeout_ms = 10'000;
  std::string csv_path;
  std::string json_path;
  std::string report_path;
  bool no_progress = false;
  std::string protocol = "grpc";
  std::string http_url;
  bool http_json = false;
  std::string shared_memory = "none";
  int64_t output_shared_memory_size = 102400;
};

void AddFlags(CLI::App& app, Flags& flags) {
  app.add_option("-m,--model", flags.model, "Model to load-test")->required();
  app.add_option("-x,--model-version", flags.model_version,
                 "Model version (default: the server's choice)");
  app.add_option("-u,--url", flags.url, "Server address host:port")
      ->envname("SLUICE_URL")
      ->capture_default_str();
  client::AddTlsFlags(app, flags.tls);
  app.add_option("--protocol", flags.protocol,
                 "grpc, or http: KServe v2 HTTP/REST, binary tensors unless --http-json (needs "
                 "--mode sync; metadata and statistics still come over gRPC from --url)")
      ->check(CLI::IsMember({"grpc", "http"}))
      ->capture_default_str();
  app.add_option("--http-url", flags.http_url,
                 "With --protocol http: the server's HTTP host:port (default: --url's host, "
                 "port 8000); plaintext only")
      ->envname("SLUICE_HTTP_URL");
  app.add_flag("--http-json", flags.http_json,
               "With --protocol http: JSON tensors both ways instead of binary ones");
  app.add_option("--shared-memory", flags.shared_memory,
                 "none, or system: inputs and outputs travel through POSIX shared-memory regions "
                 "the load tester makes and registers (Triton's extension, as perf_analyzer's "
                 "flag of the same name); the server must run on this host. gRPC, plaintext")
      ->check(CLI::IsMember({"none", "system"}))
      ->capture_default_str();
  app.add_option("--output-shared-memory-size", flags.output_shared_memory_size,
                 "With --shared-memory: bytes reserved for each output (perf_analyzer's flag); "
                 "at least the output's size")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 34))
      ->capture_default_str();
  app.add_option("--mode", flags.mode,
                 "sync: a thread per outstanding request, blocking calls; async: gRPC callback "
                 "API; stream: one ModelStreamInfer stream")
      ->check(CLI::IsMember({"sync", "async", "stream"}))
      ->capture_default_str();
  app.add_option("--concurrency", flags.concurrency,
                 "Closed loop: requests kept in flight. N, START:END:xFACTOR, START:END:+STEP "
                 "(default 1)");
  app.add_option("--request-rate", flags.request_rate,
                 "Open loop: requests per second, whatever the answers (same sweep syntax); "
                 "needs --mode async or stream");
  app.add_option("--arrivals", flags.arrivals, "Open loop: constant gaps or Poisson arrivals")
      ->check(CLI::IsMember({"constant", "poisson"}))
      ->capture_default_str();
  app.add_option("--max-outstanding", flags.max_outstanding,
                 "Open loop: most requests in flight; a request due while the cap is reached is "
                 "skipped and counted")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("-b,--batch-size", flags.batch_size,
                 "Items per request (the leading -1 dimension of each input)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--shape", flags.shapes,
                 "NAME:D1,D2,...: the shape of an input with -1 dimensions, without the batch "
                 "dimension (repeatable), e.g. --shape INPUT0:1024");
  app.add_option("--seq-len", flags.sequence_length,
                 "With random inputs: the length of -1 dimensions no --shape fixes (a sequence "
                 "model's tokens: every input [batch, seq-len]; attention_mask all ones, "
                 "token_type_ids zeros). N: every request N long; MIN:MAX: ragged traffic, each "
                 "request's length drawn uniformly from MIN to MAX (both included) by --seed and "
                 "the request's number in the run (gRPC only), e.g. -m embedder --seq-len 8:128")
      ->capture_default_str();
  app.add_option("--vocab-size", flags.vocab_size,
                 "With random inputs: input_ids are drawn uniformly from [0, N). KServe metadata "
                 "does not tell the vocabulary: give the model's vocab_size (config.json) to "
                 "cover it; the default is inside any vocabulary")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31))
      ->capture_default_str();
  app.add_option("--input-data", flags.input_data,
                 "random, zeros, or a JSON file of inputs (sluice-client --input-json format)")
      ->capture_default_str();
  app.add_option("--text-file", flags.text_file,
                 "Text inputs for an encoder model with a tokenizer: one text per line (empty "
                 "lines skipped, at most 100000), each request a line drawn at random, sent as "
                 "input 'text' BYTES [1, 1] (gRPC only), e.g. -m embedder --text-file texts.txt")
      ->check(CLI::ExistingFile);
  app.add_option("--priority", flags.priority,
                 "Priority level of every request (the \"priority\" parameter; 1 is served first, "
                 "for models with dynamic_batching priority_levels); 0: not sent, the model's "
                 "default level")
      ->capture_default_str();
  app.add_option("--seed", flags.seed,
                 "Seed of random inputs, of --seq-len MIN:MAX lengths, of the line --text-file "
                 "sends, and of Poisson arrivals")
      ->capture_default_str();
  app.add_option("--warmup-ms", flags.warmup_ms, "Unmeasured load before each level's windows")
      ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}))
      ->capture_default_str();
  app.add_option("--window-ms", flags.window_ms, "Length of one measurement window")
      ->check(CLI::Range(int64_t{10}, int64_t{3'600'000}))
      ->capture_default_str();
  app.add_option("--stability-percent", flags.stability_percent,
                 "A level is done when throughput and p99 of the last 3 windows stay within "
                 "this percentage of their mean")
      ->check(CLI::Range(0.1, 1000.0))
      ->capture_default_str();
  app.add_option("--max-windows", flags.max_windows, "Most windows per level, stable or not")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--max-requests", flags.max_requests, "Most requests in the whole run")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000'000}))
      ->capture_default_str();
  app.add_option("--max-duration-s", flags.max_duration_s,
                 "Longest run (the current window is cut short; draining may add --timeout-ms)")
      ->check(CLI::Range(int64_t{1}, int64_t{86'400}))
      ->capture_default_str();
  app.add_option("--timeout-ms", flags.timeout_ms,
                 "Deadline of each request, and the longest wait for outstanding requests when a "
                 "level ends")
      ->envname("SLUICE_TIMEOUT_MS")
      ->check(CLI::Range(int64_t{1}, int64_t{3'600'000}))
      ->capture_default_str();
  app.add_option("--csv", flags.csv_path, "Write one CSV line per level to this file");
  app.add_option("--json", flags.json_path, "Write the full results as JSON to this file");
  app.add_option("--report", flags.report_path,
                 "Write a self-contained HTML report with SVG charts to this file");
  app.add_flag("--no-progress", flags.no_progress,
               "No progress line on stderr (it is shown only when stderr is a terminal)");
}

int Fail(absl::string_view message) {
  std::cerr << "error: " << message << "\n";
  return kExitError;
}

std::string ShellQuote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789-_=:,./+%@") == std::string::npos) {
    return arg;
  }
  std::string quoted = "'";
  for (char c : arg) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// "identity, simple" (ready models), or "" if the index cannot be read.
std::string AvailableModels(client::InferenceClient& client) {
  absl::StatusOr<inference::RepositoryIndexResponse> index = client.RepositoryIndex(true);
  if (!index.ok()) return "";
  std::vector<std::string> names;
  for (const auto& model : index->models()) names.push_back(model.name());
  return absl::StrJoin(names, ", ");
}

void PrintProgress(const Progress& p) {
  const std::string line = FormatProgressLine(p);
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
}

int Run(const Flags& flags, const std::string& command_line) {
  // ---- Options that need no server.
  RunOptions options;
  options.model_name = flags.model;
  options.model_version = flags.model_version;
  options.mode = *ParseLoadMode(flags.mode);  // CLI11 checked the value
  options.arrivals = *ParseArrivalProcess(flags.arrivals);
  options.max_outstanding = flags.max_outstanding;
  options.warmup_ms = flags.warmup_ms;
  options.window_ms = flags.window_ms;
  options.stability_percent = flags.stability_percent;
  options.max_windows = flags.max_windows;
  options.max_requests = flags.max_requests;
  options.max_duration_ms = flags.max_duration_s * 1000;
  options.drain_timeout_ms = flags.timeout_ms;
  options.seed = flags.seed;
  if (!flags.request_rate.empty() && !flags.concurrency.empty()) {
    std::cerr
        << "error: give --concurrency (closed loop) or --request-rate (open loop), not both\n";
    return kExitUsage;
  }
  if (!flags.request_rate.empty()) {
    absl::StatusOr<std::vector<double>> rates = ParseSweep(flags.request_rate);
    if (!rates.ok()) {
      std::cerr << "error: --request-rate: " << rates.status().message() << "\n";
      return kExitUsage;
    }
    if (options.mode == LoadMode::kSync) {
      std::cerr << "error: --request-rate needs --mode async or stream (a blocking call per "
                   "thread cannot keep a schedule)\n";
      return kExitUsage;
    }
    options.request_rates = *std::move(rates);
  } else {
    absl::StatusOr<std::vector<int64_t>> levels =
        ParseIntegerSweep(flags.concurrency.empty() ? "1" : flags.concurrency, kMaxConcurrency);
    if (!levels.ok()) {
      std::cerr << "error: --concurrency: " << levels.status().message() << "\n";
      return kExitUsage;
    }
    options.concurrency_levels = *std::move(levels);
  }
  RequestSpec spec;
  spec.model_version = flags.model_version;
  spec.batch_size = flags.batch_size;
  absl::StatusOr<client::LengthRange> lengths =
      client::ParseLengthRange(flags.sequence_length, kMaxSequenceLength);
  if (!lengths.ok()) {
    std::cerr << "error: --seq-len: " << lengths.status().message() << "\n";
    return kExitUsage;
  }
  spec.sequence_length = lengths->min;
  spec.token_id_limit = flags.vocab_size;
  spec.seed = flags.seed;
  if (!lengths->fixed()) {
    if (!flags.text_file.empty() || (flags.input_data != "random" && flags.input_data != "zeros") ||
        flags.shared_memory != "none" || flags.protocol != "grpc") {
      std::cerr << "error: --seq-len MIN:MAX (a length per request) needs random or zero inputs "
                   "over gRPC: leave out --text-file, --input-data FILE, --shared-memory and "
                   "--protocol http\n";
      return kExitUsage;
    }
  }
  spec.priority = flags.priority;
  for (const std::string& text : flags.shapes) {
    absl::StatusOr<std::pair<std::string, std::vector<int64_t>>> shape = ParseShapeFlag(text);
    if (!shape.ok()) {
      std::cerr << "error: " << shape.status().message() << "\n";
      return kExitUsage;
    }
    spec.shapes[shape->first] = shape->second;
  }
  if (flags.input_data == "zeros") {
    spec.fill = InputFill::kZeros;
  } else if (flags.input_data != "random") {
    absl::StatusOr<std::string> text = ReadFile(flags.input_data);
    if (!text.ok()) return Fail(absl::StrCat("--input-data: ", text.status().message()));
    spec.input_json = *std::move(text);
  }

  // ---- The server and the model.
  client::ClientOptions client_options;
  client_options.timeout_ms = flags.timeout_ms;
  client_options.tls = flags.tls;
  // A stream lives for one level; this bounds it even if the server stops answering.
  client_options.stream_timeout_ms = options.max_duration_ms + 2 * flags.timeout_ms;
  absl::StatusOr<std::unique_ptr<client::InferenceClient>> connected =
      client::InferenceClient::Create(flags.url, client_options);
  if (!connected.ok()) return Fail(connected.status().message());
  client::InferenceClient& client = **connected;

  absl::StatusOr<bool> live = client.ServerLive();
  if (!live.ok()) {
    return Fail(
        absl::StrCat("cannot reach a KServe v2 server at ", flags.url,
                     " (is it running? --url sets the address): ", live.status().message()));
  }
  ReportContext context;
  if (absl::StatusOr<inference::ServerMetadataResponse> server = client.ServerMetadata();
      server.ok()) {
    context.server = absl::StrCat(server->name(), " ", server->version());
  }
  absl::StatusOr<inference::ModelMetadataResponse> metadata =
      client.ModelMetadata(flags.model, flags.model_version);
  if (!metadata.ok()) {
    if (metadata.status().code() == absl::StatusCode::kNotFound) {
      const std::string available = AvailableModels(client);
      return Fail(
          absl::StrCat("model '", flags.model, "' is not known to the server at ", flags.url, ": ",
                       metadata.status().message(),
                       available.empty() ? "" : absl::StrCat(" (ready models: ", available, ")")));
    }
    return Fail(absl::StrCat("cannot read the metadata of model '", flags.model,
                             "': ", metadata.status().message()));
  }
  absl::StatusOr<bool> ready = client.ModelReady(flags.model, flags.model_version);
  if (!ready.ok() || !*ready) {
    return Fail(absl::StrCat("model '", flags.model, "' is not ready on ", flags.url,
                             ready.ok() ? "" : absl::StrCat(": ", ready.status().message())));
  }

  absl::StatusOr<inference::ModelInferRequest> request = BuildRequest(*metadata, spec);
  std::shared_ptr<const RaggedRequestSource> ragged;
  if (!lengths->fixed()) {
    // Ragged traffic: the source makes each send's request; the probe is one at the longest
    // length, so that a maximum the model refuses fails here with the server's reason.
    absl::StatusOr<std::unique_ptr<RaggedRequestSource>> made =
        RaggedRequestSource::Create(*metadata, spec, *lengths);
    if (!made.ok()) return Fail(absl::StrCat("--seq-len: ", made.status().message()));
    ragged = *std::move(made);
    options.request_source = [ragged](uint64_t index) {
      std::shared_ptr<const inference::ModelInferRequest> next = ragged->Make(index);
      const int64_t tokens = RequestTokens(*next);
      return OutgoingRequest{std::move(next), tokens};
    };
    request = *ragged->MakeLongest();
  } else if (!flags.text_file.empty()) {
    // One request per line of the file; the first is the probe and names the model.
    if (flags.protocol == "http") return Fail("--text-file works over gRPC only");
    absl::StatusOr<std::string> text = ReadFile(flags.text_file);
    if (!text.ok()) return Fail(absl::StrCat("--text-file: ", text.status().message()));
    for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipWhitespace())) {
      if (options.request_variants.size() >= 100000) break;
      inference::ModelInferRequest variant;
      variant.set_model_name(flags.model);
      variant.set_model_version(flags.model_version);
      if (flags.priority > 0) {
        (*variant.mutable_parameters())["priority"].set_uint64_param(flags.priority);
      }
      absl::Status added = client::AddBytesInput(variant, "text", {int64_t{1}, int64_t{1}},
                                                 {std::string(absl::StripSuffix(line, "\r"))});
      if (!added.ok()) return Fail(added.message());
      options.request_variants.push_back(
          std::make_shared<const inference::ModelInferRequest>(std::move(variant)));
    }
    if (options.request_variants.empty()) {
      return Fail(absl::StrCat("--text-file ", flags.text_file, " holds no text"));
    }
    request = *options.request_variants.front();
  }
  if (!request.ok()) return Fail(request.status().message());
  // --shared-memory system: the request names regions instead of carrying bytes. Kept until the
  // run ends (unregistered and unlinked then).
  std::unique_ptr<SharedMemorySetup> shared_memory;
  if (flags.shared_memory == "system") {
    if (flags.protocol != "grpc" || flags.tls.enabled) {
      return Fail("--shared-memory system needs --protocol grpc over plaintext");
    }
    absl::StatusOr<std::unique_ptr<SharedMemorySetup>> setup = SharedMemorySetup::Create(
        grpc::CreateChannel(flags.url, grpc::InsecureChannelCredentials()), *metadata,
        flags.output_shared_memory_size, *request);
    if (!setup.ok()) return Fail(absl::StrCat("--shared-memory: ", setup.status().message()));
    shared_memory = *std::move(setup);
  }
  // One request first, so that a request the model rejects fails here with the server's reason
  // rather than as a window of errors. It is counted in the totals (the server counts it too).
  client::InferResult probe = client.Infer(*request);
  if (!probe.ok()) {
    return Fail(absl::StrCat("the server rejected a test request (", DescribeInputs(*request),
                             "): ", absl::StatusCodeToString(probe.status().code()), ": ",
                             probe.status().message()));
  }

  if (flags.protocol == "http") {
    if (options.mode != LoadMode::kSync) {
      return Fail("--protocol http needs --mode sync (one keep-alive connection per thread)");
    }
    std::string http_url = flags.http_url;
    if (http_url.empty()) {
      absl::StatusOr<std::pair<std::string, int>> grpc = client::SplitHostPort(flags.url);
      if (!grpc.ok()) return Fail(grpc.status().message());
      http_url = absl::StrCat(grpc->first, ":8000");
    }
    absl::StatusOr<std::pair<std::string, int>> http = client::SplitHostPort(http_url);
    if (!http.ok()) return Fail(absl::StrCat("--http-url: ", http.status().message()));
    absl::StatusOr<HttpInferBody> body = BuildHttpInferBody(*request, flags.http_json);
    if (!body.ok()) return Fail(body.status().message());
    auto shared = std::make_shared<const HttpInferBody>(*std::move(body));
    const int timeout_ms = static_cast<int>(flags.timeout_ms);
    options.make_sync_sender = [host = http->first, port = http->second, shared,
                                timeout_ms]() -> absl::StatusOr<std::function<absl::Status()>> {
      auto sender = std::make_shared<HttpSender>(host, port, shared, timeout_ms);
      return std::function<absl::Status()>([sender] { return sender->Send(); });
    };
    // The same probe over HTTP: a request the HTTP front end refuses fails here.
    if (absl::Status status = HttpSender(http->first, http->second, shared, timeout_ms).Send();
        !status.ok()) {
      return Fail(absl::StrCat("the server rejected a test request over HTTP at ", http_url, ": ",
                               status.message()));
    }
    context.url = absl::StrCat("http://", http_url,
                               flags.http_json ? " (JSON tensors)" : " (binary tensors)");
  } else {
    context.url = flags.url;
    if (shared_memory != nullptr)
      absl::StrAppend(&context.url, " (", shared_memory->description(), ")");
  }
  options.batch_size = RequestBatchSize(*metadata, *request);
  options.request_tokens = RequestTokens(*request);
  context.model = flags.model;
  context.model_version = flags.model_version;
  context.mode = options.mode;
  context.open_loop = !options.request_rates.empty();
  context.arrivals = options.arrivals;
  context.batch_size = options.batch_size;
  context.inputs = ragged != nullptr ? ragged->Describe() : DescribeInputs(*request);
  context.input_fill =
      !flags.text_file.empty()
          ? absl::StrCat("one of ", options.request_variants.size(), " lines of ", flags.text_file)
      : spec.input_json.empty() ? flags.input_data
                                : absl::StrCat("from ", flags.input_data);
  context.request_bytes = RequestPayloadBytes(*request);
  context.counts_tokens = options.request_tokens > 0;
  if (ragged != nullptr) {
    // Bytes per request vary: report the mean of the run's first requests.
    constexpr int kSampled = 256;
    int64_t bytes = 0;
    for (int i = 0; i < kSampled; ++i) bytes += RequestPayloadBytes(*ragged->Make(i));
    context.request_bytes = bytes / kSampled;
    context.sequence_lengths =
        absl::StrCat("sequence length per request uniform over [", lengths->min, ", ", lengths->max,
                     "] (seed ", flags.seed, ")");
  }
  context.warmup_ms = options.warmup_ms;
  context.window_ms = options.window_ms;
  context.stability_percent = options.stability_percent;
  context.max_windows = options.max_windows;
  context.started_at = absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone());
  context.command_line = command_line;

  const bool progress = !flags.no_progress && isatty(STDERR_FILENO) == 1;
  if (progress) options.on_progress = PrintProgress;

  absl::StatusOr<RunResult> result = RunLoad(
      client, std::make_shared<const inference::ModelInferRequest>(*std::move(request)), options);
  if (progress) std::fprintf(stderr, "\r\033[K");
  if (!result.ok()) return Fail(result.status().message());
  result->totals.sent += 1;  // the probe
  result->totals.succeeded += 1;
  result->totals.succeeded_tokens += options.request_tokens;

  std::cout << FormatConsoleTable(context, *result) << std::flush;
  int exit_code = kExitOk;
  const std::pair<const std::string*, std::string (*)(const ReportContext&, const RunResult&)>
      outputs[] = {{&flags.csv_path, &FormatCsv},
                   {&flags.json_path, &FormatJson},
                   {&flags.report_path, &FormatHtml}};
  for (const auto& [path, format] : outputs) {
    if (path->empty()) continue;
    absl::Status written = WriteTextFile(*path, format(context, *result));
    if (!written.ok()) {
      std::cerr << "error: " << written.message() << "\n";
      exit_code = kExitError;
    }
  }
  if (result->aborted) {
    std::cerr << "error: " << result->early_stop.message() << "\n";
    return kExitError;
  }
  if (!result->early_stop.ok() && exit_code == kExitOk) exit_code = kExitLimit;
  return exit_code;
}

}  // namespace
}  // namespace sluice::loadtest

int main(int argc, char** argv) {
  // gRPC locks absl::Mutex on every call. Debian's Abseil is built without NDEBUG, so its
  // deadlock detection is on by default: every lock then updates a process-wide lock graph under
  // a global lock (2-4% of the server's CPU at concurrency 1, measured with perf). It checks
  // gRPC's locks, not ours (common::Mutex is a std::mutex); TSan builds check ours.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  sluice::loadtest::Flags flags;
  CLI::App app{
      "sluice-loadtest: load-tests a model on a KServe v2 gRPC server (sluice, Triton, "
      "sluice-echo-server) and reports throughput, latency percentiles and the server-side "
      "breakdown"};
  sluice::loadtest::AddFlags(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : sluice::loadtest::kExitUsage;
  }
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) args.push_back(sluice::loadtest::ShellQuote(argv[i]));
  return sluice::loadtest::Run(flags, absl::StrJoin(args, " "));
}
