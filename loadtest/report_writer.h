#pragma once

// The outputs of a load test: a console table, CSV, JSON and a self-contained HTML report with
// SVG charts (no scripts, no external style sheets or fonts: one file that opens anywhere).
// Pure functions of their arguments; safe from any thread.
//
// Units: the console shows latencies in milliseconds; CSV and JSON carry microseconds (`_us`)
// and requests per second (`_rps`), as their column and field names say.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "loadtest/load_runner.h"

namespace sluice::loadtest {

// What was measured, for the reports' headers.
struct ReportContext {
  std::string url;
  std::string server;  // e.g. "sluice 0.1.0", from ServerMetadata ("" if unknown)
  std::string model;
  std::string model_version;
  LoadMode mode = LoadMode::kAsync;
  bool open_loop = false;
  ArrivalProcess arrivals = ArrivalProcess::kConstant;
  int64_t batch_size = 1;
  std::string inputs;         // DescribeInputs()
  std::string input_fill;     // "random", "zeros" or the JSON file
  int64_t request_bytes = 0;  // per request (the mean, when lengths vary)
  // Whether requests carry known tokens (a sequence model's token ids): tokens/s is reported.
  bool counts_tokens = false;
  // Ragged traffic: "sequence length per request uniform over [8, 256] (seed 0)"; "" otherwise.
  std::string sequence_lengths;
  int64_t warmup_ms = 0;
  int64_t window_ms = 0;
  double stability_percent = 0;
  int max_windows = 0;
  std::string started_at;  // UTC, RFC 3339
  std::string command_line;
};

std::string FormatConsoleTable(const ReportContext& context, const RunResult& result);
// One header line, then one line per level. Text fields are quoted when they need to be.
std::string FormatCsv(const ReportContext& context, const RunResult& result);
// {"tool": ..., "config": {...}, "levels": [{...}], "totals": {...}, "early_stop": ...}
std::string FormatJson(const ReportContext& context, const RunResult& result);
// A complete HTML5 document: header, throughput and latency-percentile charts against the load
// level (inline SVG), and the results table.
std::string FormatHtml(const ReportContext& context, const RunResult& result);

// Writes `contents` to `path` (replacing it). Returns an error naming the path on failure.
absl::Status WriteTextFile(const std::string& path, absl::string_view contents);

}  // namespace sluice::loadtest
