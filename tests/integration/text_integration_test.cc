// Text inputs through the real server process (issue 20), driven by the client library:
//   - the tokenizer's statistics: ModelStatistics (gRPC) and /v2/models/{m}/stats (HTTP) report a
//     model's tokenizer as an entry of its own, `<model>/tokenizer`, as Triton reports the
//     composing model of an ensemble, with asserted counts after text requests and a failed one;
//   - SIGTERM with text requests waiting in the tokenizer pool: every accepted request gets its
//     full answer, new ones are refused UNAVAILABLE, and the server exits 0.
// The bundled `embedder` has a tokenizer.json (truncation at 128 tokens).

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <mutex>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/inference_client.h"
#include "client/tensor_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/server_process.h"
#include "tests/support/http_get.h"

namespace sluice {
namespace {

using client::AddBytesInput;
using client::AddRequestedOutput;
using client::DecodeOutput;
using client::InferenceClient;
using inference::ModelInferRequest;
using inference::ModelStatistics;
using inference::ModelStatisticsResponse;
using json = nlohmann::json;
using ::testing::HasSubstr;
using testing::ServerProcess;

std::unique_ptr<InferenceClient> Connect(const ServerProcess& server) {
  auto client = InferenceClient::Create(server.address());
  EXPECT_TRUE(client.ok()) << client.status();
  return *std::move(client);
}

// An `embedder` request with `texts` as its BYTES input `text` ([n, 1]), asking for the
// embedding and the tokens.
ModelInferRequest TextRequest(const std::vector<std::string>& texts) {
  ModelInferRequest request;
  request.set_model_name("embedder");
  EXPECT_TRUE(AddBytesInput(request, "text", {static_cast<int64_t>(texts.size()), 1}, texts).ok());
  AddRequestedOutput(request, "embedding");
  AddRequestedOutput(request, "input_ids");
  return request;
}

// Words drawn from a small set: every one is in the embedder's vocabulary or splits into pieces,
// so that tokenizing `bytes` of them costs time in proportion to their length.
std::string LongText(std::mt19937& rng, size_t bytes) {
  static const char* const kWords[] = {"the",   "quick", "brown",  "fox",       "jumps",
                                       "over",  "lazy",  "dogs",   "while",     "sluice",
                                       "every", "queue", "drains", "carefully", "tokens"};
  std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
  std::string text;
  while (text.size() < bytes) {
    if (!text.empty()) text += ' ';
    text += kWords[pick(rng)];
  }
  return text;
}

const ModelStatistics* FindEntry(const ModelStatisticsResponse& response, const std::string& name) {
  for (const ModelStatistics& entry : response.model_stats()) {
    if (entry.name() == name) return &entry;
  }
  return nullptr;
}

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// The counts of one statistics entry as the HTTP JSON gives them, for comparing with gRPC's.
std::string JsonCounts(const json& entry) {
  const json& s = entry.at("inference_stats");
  std::vector<std::string> parts = {entry.at("name").get<std::string>(),
                                    entry.at("version").get<std::string>(),
                                    absl::StrCat(entry.at("inference_count").get<uint64_t>()),
                                    absl::StrCat(entry.at("execution_count").get<uint64_t>()),
                                    absl::StrCat(entry.at("last_inference").get<uint64_t>())};
  for (const char* phase :
       {"success", "fail", "queue", "compute_input", "compute_infer", "compute_output"}) {
    parts.push_back(absl::StrCat(phase, "=", s.at(phase).at("count").get<uint64_t>(), "/",
                                 s.at(phase).at("ns").get<uint64_t>()));
  }
  return absl::StrJoin(parts, " ");
}

std::string ProtoCounts(const ModelStatistics& entry) {
  const auto& s = entry.inference_stats();
  std::vector<std::string> parts = {
      entry.name(), entry.version(), absl::StrCat(entry.inference_count()),
      absl::StrCat(entry.execution_count()), absl::StrCat(entry.last_inference())};
  const std::pair<const char*, const inference::StatisticDuration*> phases[] = {
      {"success", &s.success()},
      {"fail", &s.fail()},
      {"queue", &s.queue()},
      {"compute_input", &s.compute_input()},
      {"compute_infer", &s.compute_infer()},
      {"compute_output", &s.compute_output()}};
  for (const auto& [phase, d] : phases) {
    parts.push_back(absl::StrCat(phase, "=", d->count(), "/", d->ns()));
  }
  return absl::StrJoin(parts, " ");
}

json HttpJson(const ServerProcess& server, const std::string& path, int expected_status = 200) {
  const testing::HttpResponse response = testing::HttpGet(server.http_port(), path);
  EXPECT_EQ(response.status, expected_status) << path << ": " << response.body;
  json parsed = json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(parsed.is_discarded()) << path << ": " << response.body;
  return parsed;
}

TEST(TokenizerStatisticsTest, ReportedAsAComposingModelOverGrpcAndHttp) {
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository()});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Connect(**server);

  // Before any text request the entry is there, all zeros, right after its model.
  auto before = client->ModelStatistics("embedder");
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_EQ(before->model_stats_size(), 2);
  EXPECT_EQ(before->model_stats(0).name(), "embedder");
  EXPECT_EQ(before->model_stats(1).name(), "embedder/tokenizer");
  EXPECT_EQ(before->model_stats(1).version(), "1");
  EXPECT_EQ(before->model_stats(1).inference_stats().success().count(), 0u);
  EXPECT_EQ(before->model_stats(1).last_inference(), 0u);

  // Five text requests of 1..5 texts (15 items), and one with invalid UTF-8 in its second item,
  // which the tokenizer refuses.
  const uint64_t start_ms = NowMs();
  constexpr int kRequests = 5;
  for (int i = 0; i < kRequests; ++i) {
    std::vector<std::string> texts;
    for (int j = 0; j <= i; ++j) texts.push_back(absl::StrCat("sentence ", j, " of request ", i));
    auto answer = client->Infer(TextRequest(texts));
    ASSERT_TRUE(answer.ok()) << answer.status();
  }
  auto bad = client->Infer(TextRequest({"fine", "bad \xff bytes"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("batch item 1"));

  auto after = client->ModelStatistics("embedder");
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->model_stats_size(), 2);
  const ModelStatistics& model = after->model_stats(0);
  const ModelStatistics& tokenizer = after->model_stats(1);
  ASSERT_EQ(model.name(), "embedder");
  ASSERT_EQ(tokenizer.name(), "embedder/tokenizer");
  EXPECT_EQ(tokenizer.version(), "1");
  const auto& t = tokenizer.inference_stats();
  EXPECT_EQ(t.success().count(), static_cast<uint64_t>(kRequests));
  EXPECT_EQ(t.fail().count(), 1u);
  EXPECT_EQ(t.queue().count(), static_cast<uint64_t>(kRequests));
  EXPECT_EQ(t.compute_infer().count(), static_cast<uint64_t>(kRequests));
  EXPECT_EQ(t.compute_input().count(), 0u);  // tokenization is one pass: all compute_infer
  EXPECT_EQ(t.compute_output().count(), 0u);
  EXPECT_EQ(tokenizer.execution_count(), static_cast<uint64_t>(kRequests));
  EXPECT_EQ(tokenizer.inference_count(), 15u);  // 1 + 2 + 3 + 4 + 5 texts
  EXPECT_GT(t.success().ns(), 0u);
  EXPECT_GT(t.fail().ns(), 0u);
  EXPECT_GT(t.queue().ns(), 0u);
  EXPECT_GT(t.compute_infer().ns(), 0u);
  EXPECT_LE(t.queue().ns() + t.compute_infer().ns(), t.success().ns());
  EXPECT_GE(tokenizer.last_inference(), start_ms);
  EXPECT_LE(tokenizer.last_inference(), NowMs());
  // One batch_stats entry per request size, each with one tokenization.
  ASSERT_EQ(tokenizer.batch_stats_size(), kRequests);
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(tokenizer.batch_stats(i).batch_size(), static_cast<uint64_t>(i + 1));
    EXPECT_EQ(tokenizer.batch_stats(i).compute_infer().count(), 1u);
    EXPECT_GT(tokenizer.batch_stats(i).compute_infer().ns(), 0u);
  }
  // The model counts the same requests end to end (tokenization included), and the failure.
  EXPECT_EQ(model.inference_stats().success().count(), static_cast<uint64_t>(kRequests));
  EXPECT_EQ(model.inference_stats().fail().count(), 1u);
  EXPECT_EQ(model.inference_count(), 15u);
  EXPECT_GE(model.inference_stats().success().ns(), t.success().ns());

  // Asked for by its own name, the tokenizer alone; a model without a tokenizer has none.
  auto alone = client->ModelStatistics("embedder/tokenizer");
  ASSERT_TRUE(alone.ok()) << alone.status();
  ASSERT_EQ(alone->model_stats_size(), 1);
  EXPECT_EQ(ProtoCounts(alone->model_stats(0)), ProtoCounts(tokenizer));
  auto versioned = client->ModelStatistics("embedder/tokenizer", "1");
  ASSERT_TRUE(versioned.ok()) << versioned.status();
  EXPECT_EQ(versioned->model_stats_size(), 1);
  auto none = client->ModelStatistics("simple/tokenizer");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("not a loaded model with a tokenizer"));
  EXPECT_EQ(client->ModelStatistics("embedder/tokenizer", "2").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(
      client->ModelStatistics("simple").value_or(ModelStatisticsResponse{}).model_stats_size(), 1);

  // Every model: the tokenizer right after its model, and no other extra entry.
  auto all = client->ModelStatistics();
  ASSERT_TRUE(all.ok()) << all.status();
  std::vector<std::string> names;
  for (const ModelStatistics& entry : all->model_stats()) names.push_back(entry.name());
  EXPECT_EQ(names, (std::vector<std::string>{"embedder", "embedder/tokenizer", "identity", "mlp",
                                             "simple"}));
  ASSERT_NE(FindEntry(*all, "embedder/tokenizer"), nullptr);
  EXPECT_EQ(ProtoCounts(*FindEntry(*all, "embedder/tokenizer")), ProtoCounts(tokenizer));

  // HTTP gives the same entries (nothing ran in between), every phase present.
  json http = HttpJson(**server, "/v2/models/embedder/stats");
  ASSERT_EQ(http["model_stats"].size(), 2u);
  EXPECT_EQ(JsonCounts(http["model_stats"][0]), ProtoCounts(model));
  EXPECT_EQ(JsonCounts(http["model_stats"][1]), ProtoCounts(tokenizer));
  ASSERT_EQ(http["model_stats"][1]["batch_stats"].size(), static_cast<size_t>(kRequests));
  EXPECT_EQ(http["model_stats"][1]["batch_stats"][4]["batch_size"], 5);
  // The tokenizer by its own name: as tritonclient puts it in the path ('/' unescaped), escaped,
  // and with a version.
  for (const char* path :
       {"/v2/models/embedder/tokenizer/stats", "/v2/models/embedder%2Ftokenizer/stats",
        "/v2/models/embedder/tokenizer/versions/1/stats"}) {
    json one = HttpJson(**server, path);
    ASSERT_EQ(one["model_stats"].size(), 1u) << path;
    EXPECT_EQ(JsonCounts(one["model_stats"][0]), ProtoCounts(tokenizer)) << path;
  }
  json all_http = HttpJson(**server, "/v2/models/stats");
  ASSERT_EQ(all_http["model_stats"].size(), 5u);
  EXPECT_EQ(all_http["model_stats"][1]["name"], "embedder/tokenizer");
  json missing = HttpJson(**server, "/v2/models/simple/tokenizer/stats", 404);
  EXPECT_THAT(missing.value("error", ""), HasSubstr("not a loaded model with a tokenizer"));
  EXPECT_EQ(testing::HttpGet((*server)->http_port(), "/v2/models/embedder/versions/2/stats").status,
            404);

  EXPECT_EQ((*server)->Stop().value_or(-1), 0);
}

// SIGTERM while the tokenizer pool holds text requests: one tokenizer thread, requests of long
// texts (each takes tens of milliseconds to tokenize before truncation to 128 tokens), all sent
// and received by the server before the signal, most still waiting for the tokenizer thread then.
TEST(TokenizerDrainTest, SigtermAnswersEveryTextRequestInThePoolAndRefusesNewOnes) {
  auto server = ServerProcess::Start({"--model-repository=" + testing::BundledModelRepository(),
                                      "--tokenizer-threads=1", "--tokenizer-queue-size=64",
                                      "--exit-timeout-secs=120"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Connect(**server);
  ASSERT_GT((*server)->metrics_port(), 0);

  std::mt19937 rng(20);
  // Four texts of 600 KB: about 0.08 s of tokenization per request here (30 MB/s), so that what
  // the pool holds at the signal takes well over the server's 1 s gRPC shutdown grace (a drain
  // that did not wait for the pool would see its requests cancelled). The sanitizer builds
  // tokenize 20-30x slower (ASan: ~2 s a request), so they get 1/16 of the text: the drain still
  // outlasts the grace, and the 32 requests stay well inside the client's deadline.
#ifdef SLUICE_SANITIZER_BUILD
  constexpr size_t kTextBytes = 600'000 / 16;
#else
  constexpr size_t kTextBytes = 600'000;
#endif
  const std::vector<std::string> texts = {LongText(rng, kTextBytes), LongText(rng, kTextBytes),
                                          LongText(rng, kTextBytes), LongText(rng, kTextBytes)};
  const ModelInferRequest request = TextRequest(texts);
  // The reference answer, before the drain.
  auto reference = client->Infer(request);
  ASSERT_TRUE(reference.ok()) << reference.status();
  auto reference_embedding = DecodeOutput(*reference, "embedding");
  ASSERT_TRUE(reference_embedding.ok());
  const std::vector<float> expected = reference_embedding->As<float>().value();
  ASSERT_EQ(expected.size(), texts.size() * 64);

  constexpr int kRequests = 32;
  std::mutex mu;
  std::vector<absl::Status> statuses(kRequests, absl::UnknownError("no answer"));
  std::vector<std::string> wrong;
  std::vector<std::chrono::steady_clock::time_point> answered_at(kRequests);
  std::atomic<int> answered{0};
  for (int i = 0; i < kRequests; ++i) {
    client->AsyncInfer(request, [&, i](client::InferResult result) {
      std::lock_guard<std::mutex> lock(mu);
      answered_at[i] = std::chrono::steady_clock::now();
      statuses[i] = result.status();
      if (result.ok()) {
        // The full answer: both outputs, the tokens truncated to 128 and starting with [CLS],
        // and the embedding of the reference.
        auto embedding = DecodeOutput(*result, "embedding");
        auto ids = DecodeOutput(*result, "input_ids");
        if (!embedding.ok() || !ids.ok()) {
          wrong.push_back(absl::StrCat("request ", i, ": an output is missing"));
        } else {
          const std::vector<float> got = embedding->As<float>().value_or(std::vector<float>{});
          double worst = got.size() == expected.size() ? 0 : 1;
          for (size_t k = 0; k < got.size() && k < expected.size(); ++k) {
            worst = std::max(worst, static_cast<double>(std::fabs(got[k] - expected[k])));
          }
          const std::vector<int64_t> tokens = ids->As<int64_t>().value_or(std::vector<int64_t>{});
          if (worst > 1e-5 || ids->shape != std::vector<int64_t>{4, 128} || tokens.empty() ||
              tokens[0] != 2) {
            wrong.push_back(absl::StrCat("request ", i, ": wrong answer (embedding off by ", worst,
                                         ", input_ids shape [", absl::StrJoin(ids->shape, ","),
                                         "])"));
          }
        }
      }
      answered++;
    });
  }
  // Every call has reached the server's handler (which submits at once, before it returns) when
  // the calls it holds plus those answered are all of them; and the tokenizer has finished at
  // least one, so that the others are behind it in the pool.
  const auto wait_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    const int done = answered.load();
    const std::optional<double> active =
        testing::ScrapeValue((*server)->metrics_port(), "sluice_grpc_infer_calls_active");
    auto stats = client->ModelStatistics("embedder/tokenizer");
    const uint64_t tokenized =
        stats.ok() ? stats->model_stats(0).inference_stats().success().count() : 0;
    if (active.has_value() && static_cast<int>(*active) + done >= kRequests && tokenized >= 2) {
      break;
    }
    ASSERT_LT(std::chrono::steady_clock::now(), wait_deadline) << "the requests never arrived";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const int answered_before = answered.load();
  ASSERT_EQ(kill((*server)->pid(), SIGTERM), 0);
  const auto sigterm_at = std::chrono::steady_clock::now();

  // Readiness goes false; a request sent then is refused at once, UNAVAILABLE, saying why.
  const auto ready_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (client->ServerReady().value_or(false)) {
    ASSERT_LT(std::chrono::steady_clock::now(), ready_deadline) << "readiness never went false";
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // past BeginDrain, which follows
  int refused_while_draining = 0;
  for (int i = 0; i < 3; ++i) {
    auto late = client->Infer(TextRequest({"a late sentence"}));
    ASSERT_FALSE(late.ok()) << "a request sent after SIGTERM was served";
    EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable) << late.status();
    if (absl::StrContains(late.status().message(), "shutting down")) ++refused_while_draining;
  }
  const int answered_at_refusal = answered.load();

  auto exit_code = (*server)->Stop(std::chrono::seconds(150), SIGTERM);
  client->WaitForAsync();
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0) << (*server)->Log();

  // Nothing accepted was lost: every request answered OK with its full answer.
  std::lock_guard<std::mutex> lock(mu);
  for (int i = 0; i < kRequests; ++i) EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i];
  EXPECT_TRUE(wrong.empty()) << absl::StrJoin(wrong, "\n");
  int after_sigterm = 0;
  for (int i = 0; i < kRequests; ++i) after_sigterm += answered_at[i] > sigterm_at ? 1 : 0;
  const auto last_answer = *std::max_element(answered_at.begin(), answered_at.end());
  std::printf("%d of %d text requests answered after SIGTERM, the last %.0f ms after it\n",
              after_sigterm, kRequests,
              std::chrono::duration<double, std::milli>(last_answer - sigterm_at).count());
  // The drain had work to do: most requests were still in the pool when the signal came, and
  // the refusals came while the drain was still answering them (the engine's own refusal).
  EXPECT_GE(after_sigterm, kRequests / 2) << "answered before SIGTERM: " << answered_before;
  EXPECT_LT(answered_at_refusal, kRequests) << "the drain was over before the late requests";
  EXPECT_EQ(refused_while_draining, 3);
  // The server's own counts agree: the tokenizer prepared every request (the reference's too)
  // and failed none; the model answered them all.
  const std::string log = (*server)->Log();
  EXPECT_THAT(log, HasSubstr("received SIGTERM"));
  std::smatch match;
  ASSERT_TRUE(std::regex_search(
      log, match,
      std::regex(
          "final stats model=embedder/tokenizer version=1 success=([0-9]+) failure=([0-9]+)")))
      << log;
  EXPECT_EQ(std::stoi(match[1]), kRequests + 1);
  EXPECT_EQ(std::stoi(match[2]), 0);
  ASSERT_TRUE(std::regex_search(
      log, match,
      std::regex("final stats model=embedder version=1 success=([0-9]+) failure=([0-9]+)")))
      << log;
  EXPECT_EQ(std::stoi(match[1]), kRequests + 1);
  // The late requests were refused before the engine looked the model up: no model failure.
  EXPECT_EQ(std::stoi(match[2]), 0);
}

}  // namespace
}  // namespace sluice
