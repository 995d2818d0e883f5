#include "loadtest/report_writer.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace sluice::loadtest {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;

ReportContext Context(bool open_loop) {
  ReportContext context;
  context.url = "127.0.0.1:8001";
  context.server = "sluice 0.1.0";
  context.model = "mo<del>";  // must be escaped in HTML
  context.open_loop = open_loop;
  context.batch_size = 4;
  context.inputs = "INPUT0 FP32 [4,16]";
  context.input_fill = "random";
  context.request_bytes = 256;
  context.warmup_ms = 100;
  context.window_ms = 500;
  context.stability_percent = 10;
  context.max_windows = 5;
  context.command_line = "sluice-loadtest -m 'mo<del>'";
  return context;
}

RunResult Result(bool open_loop) {
  RunResult result;
  for (int i = 0; i < 3; ++i) {
    LevelResult level;
    if (open_loop) {
      level.request_rate = 100.0 * (i + 1);
    } else {
      level.concurrency = 1 << i;
    }
    level.windows = {WindowSummary{0.5, 100, 0, 200, 900}, WindowSummary{0.5, 101, 0, 202, 910},
                     WindowSummary{0.5, 99, 1, 198, 905}};
    level.windows_reported = 3;
    level.stable = i != 2;
    level.end_reason = level.stable ? "stable" : "max windows";
    level.duration_s = 1.5;
    level.succeeded = 300;
    level.failed = i;
    level.sent = 300 + i;
    level.throughput_rps = 200.0 * (i + 1);
    level.inferences_per_s = 800.0 * (i + 1);
    level.sent_rps = level.throughput_rps;
    level.latency = LatencySummary{800, 500, 700, 850, 900, 950, 990, 1200};
    if (i > 0) {
      level.errors_by_code[absl::StatusCode::kUnavailable] = i;
      level.first_error_by_code[absl::StatusCode::kUnavailable] = "server, \"down\"";
      level.failed_latency = LatencySummary{300, 100, 250, 400, 450, 480.0 * i, 495, 500.0 * i};
    }
    level.server.available = i != 1;
    level.server.requests = 300;
    level.server.queue_us = 12.5;
    level.server.compute_infer_us = 40;
    level.server.total_us = 70;
    level.server.avg_batch_size = 1.5;
    result.levels.push_back(level);
  }
  result.totals = RunTotals{1000, 997, 3, 0, 0, 6.5};
  return result;
}

TEST(ReportWriterTest, CsvHasOneRowPerLevelAndAConsistentColumnCount) {
  const std::string csv = FormatCsv(Context(false), Result(false));
  std::vector<std::string> lines = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u);
  const size_t columns = std::count(lines[0].begin(), lines[0].end(), ',');
  EXPECT_THAT(lines[0], testing::StartsWith("concurrency,request_rate,mode"));
  for (size_t i = 1; i < lines.size(); ++i) {
    EXPECT_EQ(std::count(lines[i].begin(), lines[i].end(), ','), columns) << lines[i];
  }
  EXPECT_THAT(lines[1], testing::StartsWith("1,0,async,4,3,1,stable,"));
  EXPECT_THAT(lines[3], HasSubstr("UNAVAILABLE:2"));
}

TEST(ReportWriterTest, JsonParsesAndCarriesEveryLevel) {
  const nlohmann::json doc = nlohmann::json::parse(FormatJson(Context(true), Result(true)));
  EXPECT_EQ(doc["tool"], "sluice-loadtest");
  EXPECT_EQ(doc["config"]["load"], "request_rate");
  EXPECT_EQ(doc["config"]["model"], "mo<del>");
  ASSERT_EQ(doc["levels"].size(), 3u);
  EXPECT_EQ(doc["levels"][1]["request_rate"], 200.0);
  EXPECT_EQ(doc["levels"][1]["latency_us"]["p99"], 950.0);
  EXPECT_EQ(doc["levels"][1]["errors"]["UNAVAILABLE"]["count"], 1);
  EXPECT_EQ(doc["levels"][1]["errors"]["UNAVAILABLE"]["first_message"], "server, \"down\"");
  EXPECT_TRUE(doc["levels"][1]["server"].is_null());
  EXPECT_EQ(doc["levels"][0]["server"]["queue_us"], 12.5);
  EXPECT_EQ(doc["levels"][0]["windows"].size(), 3u);
  EXPECT_EQ(doc["totals"]["succeeded"], 997);
  EXPECT_TRUE(doc["early_stop"].is_null());
}

TEST(ReportWriterTest, HtmlIsSelfContainedWithCharts) {
  RunResult result = Result(false);
  result.early_stop = absl::DeadlineExceededError("stopped after --max-duration-s=1 seconds");
  const std::string html = FormatHtml(Context(false), result);
  EXPECT_THAT(html, testing::StartsWith("<!DOCTYPE html>"));
  EXPECT_THAT(html, EndsWith("</html>\n"));
  size_t charts = 0;
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) {
    ++charts;
  }
  EXPECT_EQ(charts, 4u);  // by level: throughput, latency; over time: throughput, p99
  EXPECT_THAT(html, HasSubstr("</svg>"));
  EXPECT_THAT(html, HasSubstr("<polyline"));
  EXPECT_THAT(html, HasSubstr("mo&lt;del&gt;"));
  EXPECT_THAT(html, Not(HasSubstr("mo<del>")));
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, Not(HasSubstr("src=")));  // nothing loaded from elsewhere
  EXPECT_THAT(html, Not(HasSubstr("href=")));
  EXPECT_THAT(html, Not(HasSubstr("@import")));
  EXPECT_THAT(html, HasSubstr("Stopped early"));
}

TEST(ReportWriterTest, HtmlHasThroughputAndLatencyOverTimeOnePointPerWindow) {
  const std::string html = FormatHtml(Context(false), Result(false));
  const size_t over_time = html.find("<h2>Over time</h2>");
  ASSERT_NE(over_time, std::string::npos);
  EXPECT_THAT(html, HasSubstr("concurrency 1: 3 windows, concurrency 2: 3 windows, concurrency 4: "
                              "3 windows"));
  const std::string section = html.substr(over_time, html.find("<h2>Results</h2>") - over_time);
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t at = section.find(needle); at != std::string::npos;
         at = section.find(needle, at + 1)) {
      ++n;
    }
    return n;
  };
  // 3 levels x 3 windows of 0.5 s: 9 points per chart, the last at 4.5 s of measured time.
  EXPECT_EQ(count("<title>completed req/s at "), 9u);
  EXPECT_EQ(count("<title>p99 ms at "), 9u);
  EXPECT_THAT(section, HasSubstr("<title>completed req/s at 4.5 s: 198</title>"));
  EXPECT_THAT(section, HasSubstr("<title>p99 ms at 0.5 s: 0.9</title>"));
  EXPECT_THAT(section, HasSubstr("Throughput over time"));
  EXPECT_THAT(section, HasSubstr("p99 latency over time"));
}

TEST(ReportWriterTest, HtmlResultsTableWrapsHeadersAndScrollsRatherThanClips) {
  const std::string html = FormatHtml(Context(true), Result(true));
  EXPECT_THAT(html, HasSubstr("<div class=\"wide\"><table class=\"results\">"));
  EXPECT_THAT(html, HasSubstr(".wide{max-width:100%;overflow-x:auto}"));
  EXPECT_THAT(html, HasSubstr("table.results th{white-space:normal"));
  EXPECT_THAT(html, HasSubstr("</table></div>"));
}

TEST(ReportWriterTest, ConsoleTableShowsLevelsErrorsAndTotals) {
  const std::string table = FormatConsoleTable(Context(true), Result(true));
  EXPECT_THAT(table, HasSubstr("open loop"));
  EXPECT_THAT(table, HasSubstr("rate/s"));
  EXPECT_THAT(table, HasSubstr("sent/s"));
  EXPECT_THAT(table, HasSubstr("errors at request rate (req/s) 300: UNAVAILABLE x2"));
  EXPECT_THAT(table, HasSubstr("total: 1000 requests sent, 997 succeeded, 3 failed"));
  EXPECT_THAT(table, HasSubstr("0.950"));  // p99 in ms
  // How fast the failures were answered, per level that had any.
  EXPECT_THAT(table, HasSubstr("failed requests at request rate (req/s) 300 answered in: p50 "
                               "0.250 ms, p99 0.960 ms, max 1.000 ms"));
  EXPECT_THAT(table, Not(HasSubstr("failed requests at request rate (req/s) 100")));
}

TEST(ReportWriterTest, TokensPerSecondWhenRequestsCarryTokens) {
  RunResult result = Result(false);
  for (LevelResult& level : result.levels) {
    level.tokens_per_s = 12345.0;
    level.mean_request_tokens = 132.0;
  }
  ReportContext context = Context(false);
  EXPECT_THAT(FormatConsoleTable(context, result), Not(HasSubstr("tokens/s")));
  context.counts_tokens = true;
  context.sequence_lengths = "sequence length per request uniform over [8, 256] (seed 0)";
  const std::string table = FormatConsoleTable(context, result);
  EXPECT_THAT(table, HasSubstr("tokens/s"));
  EXPECT_THAT(table, HasSubstr("12345"));
  EXPECT_THAT(table, HasSubstr("uniform over [8, 256]"));
  const nlohmann::json doc = nlohmann::json::parse(FormatJson(context, result));
  EXPECT_EQ(doc["levels"][0]["tokens_per_s"], 12345.0);
  EXPECT_EQ(doc["levels"][0]["mean_request_tokens"], 132.0);
  EXPECT_EQ(doc["config"]["counts_tokens"], true);
  const std::string csv = FormatCsv(context, result);
  EXPECT_THAT(csv, HasSubstr(",inferences_per_s,tokens_per_s,"));
  EXPECT_THAT(csv, HasSubstr(",12345.00,"));
  EXPECT_THAT(FormatHtml(context, result), HasSubstr("<td>12345</td>"));
}

TEST(ReportWriterTest, JsonCarriesTheFailedRequestsLatency) {
  const nlohmann::json doc = nlohmann::json::parse(FormatJson(Context(true), Result(true)));
  EXPECT_EQ(doc["levels"][2]["failed_latency_us"]["p99"], 960.0);
  EXPECT_EQ(doc["levels"][2]["failed_latency_us"]["max"], 1000.0);
  EXPECT_EQ(doc["levels"][0]["failed_latency_us"]["p99"], 0.0);
}

}  // namespace
}  // namespace sluice::loadtest
