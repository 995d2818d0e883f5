#include "loadtest/report_writer.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace sluice::loadtest {
namespace {

using json = nlohmann::ordered_json;

std::string LevelLabel(const LevelResult& level, bool open_loop) {
  return open_loop ? absl::StrFormat("%g", level.request_rate) : absl::StrCat(level.concurrency);
}

absl::string_view LevelName(bool open_loop) {
  return open_loop ? "request rate (req/s)" : "concurrency";
}

// "UNAVAILABLE:3;INTERNAL:1", or "" when there were none.
std::string ErrorCounts(const LevelResult& level) {
  std::vector<std::string> parts;
  for (const auto& [code, count] : level.errors_by_code) {
    parts.push_back(absl::StrCat(absl::StatusCodeToString(code), ":", count));
  }
  return absl::StrJoin(parts, ";");
}

// Whether the server reported anything for the level (the echo server reports zeros).
bool ServerCounted(const ServerBreakdown& server) {
  return server.available && (server.requests > 0 || server.failed > 0);
}

std::string VersionText(const ReportContext& context) {
  return context.model_version.empty() ? "server's choice" : context.model_version;
}

std::string LoadText(const ReportContext& context) {
  if (!context.open_loop) return absl::StrCat("closed loop, mode ", LoadModeName(context.mode));
  return absl::StrCat("open loop (", ArrivalProcessName(context.arrivals), " arrivals), mode ",
                      LoadModeName(context.mode));
}

// ", sequence length per request uniform over [8, 256] (seed 0)", or "".
std::string SequenceLengthsText(const ReportContext& context) {
  return context.sequence_lengths.empty() ? "" : absl::StrCat(", ", context.sequence_lengths);
}

std::string WindowsText(const ReportContext& context) {
  return absl::StrFormat(
      "windows of %d ms after a %d ms warm-up, until throughput and p99 stay within %g%% over "
      "%d windows (at most %d windows)",
      context.window_ms, context.warmup_ms, context.stability_percent, kStabilityWindows,
      context.max_windows);
}

std::string WindowsColumn(const LevelResult& level) {
  return absl::StrCat(level.windows.size(),
                      level.stable ? " stable" : absl::StrCat(" ", level.end_reason));
}

// CSV field: quoted (with doubled quotes) when it holds a comma, quote or newline.
std::string CsvField(absl::string_view text) {
  if (text.find_first_of(",\"\n\r") == absl::string_view::npos) return std::string(text);
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  quoted += '"';
  return quoted;
}

std::string HtmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// ---- SVG line chart -----------------------------------------------------------------------------

struct Series {
  std::string name;
  std::string color;
  std::vector<double> values;  // one per x label
};

// The smallest of 1, 2, 2.5, 5 x 10^k that is >= value (value > 0).
double NiceCeiling(double value) {
  if (!(value > 0) || !std::isfinite(value)) return 1;
  const double magnitude = std::pow(10.0, std::floor(std::log10(value)));
  for (double step : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (step * magnitude >= value * (1 - 1e-12)) return step * magnitude;
  }
  return 10 * magnitude;
}

std::string LineChart(absl::string_view title, absl::string_view x_title, absl::string_view y_title,
                      const std::vector<std::string>& x_labels, const std::vector<Series>& series) {
  constexpr double kWidth = 680, kHeight = 360;
  constexpr double kLeft = 80, kRight = 150, kTop = 40, kBottom = 60;
  constexpr double kPlotWidth = kWidth - kLeft - kRight, kPlotHeight = kHeight - kTop - kBottom;
  constexpr int kTicks = 5;

  double max_value = 0;
  for (const Series& s : series) {
    for (double v : s.values) max_value = std::max(max_value, v);
  }
  const double y_max = NiceCeiling(max_value * 1.05);
  const size_t n = x_labels.size();
  auto x_at = [&](size_t i) {
    return n <= 1 ? kLeft + kPlotWidth / 2 : kLeft + kPlotWidth * static_cast<double>(i) / (n - 1);
  };
  auto y_at = [&](double v) { return kTop + kPlotHeight * (1 - std::clamp(v / y_max, 0.0, 1.0)); };

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g "
      "%g\" role=\"img\" aria-label=\"%s\">\n",
      kWidth, kHeight, kWidth, kHeight, HtmlEscape(title));
  absl::StrAppendFormat(&svg, "<text x=\"%g\" y=\"22\" class=\"title\">%s</text>\n", kLeft,
                        HtmlEscape(title));
  // Grid and y ticks.
  for (int t = 0; t <= kTicks; ++t) {
    const double v = y_max * t / kTicks;
    const double y = y_at(v);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" class=\"grid\"/>"
                          "<text x=\"%g\" y=\"%.1f\" class=\"ytick\">%g</text>\n",
                          kLeft, y, kLeft + kPlotWidth, y, kLeft - 6, y + 4, v);
  }
  // X ticks: at most about 12 labels, so that a time series of many windows stays legible.
  const size_t label_every = std::max<size_t>(1, (n + 11) / 12);
  for (size_t i = 0; i < n; ++i) {
    if (i % label_every != 0 && i + 1 != n) continue;
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%g\" class=\"xtick\">%s</text>\n", x_at(i),
                          kTop + kPlotHeight + 18, HtmlEscape(x_labels[i]));
  }
  absl::StrAppendFormat(&svg,
                        "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" class=\"axis\"/>"
                        "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" class=\"axis\"/>\n",
                        kLeft, kTop, kLeft, kTop + kPlotHeight, kLeft, kTop + kPlotHeight,
                        kLeft + kPlotWidth, kTop + kPlotHeight);
  absl::StrAppendFormat(&svg, "<text x=\"%g\" y=\"%g\" class=\"xtitle\">%s</text>\n",
                        kLeft + kPlotWidth / 2, kHeight - 14, HtmlEscape(x_title));
  absl::StrAppendFormat(&svg,
                        "<text x=\"18\" y=\"%g\" class=\"ytitle\" transform=\"rotate(-90 18 "
                        "%g)\">%s</text>\n",
                        kTop + kPlotHeight / 2, kTop + kPlotHeight / 2, HtmlEscape(y_title));
  // Series, and the legend on the right.
  for (size_t s = 0; s < series.size(); ++s) {
    const Series& line = series[s];
    std::string points;
    for (size_t i = 0; i < line.values.size() && i < n; ++i) {
      absl::StrAppendFormat(&points, "%s%.1f,%.1f", i == 0 ? "" : " ", x_at(i),
                            y_at(line.values[i]));
    }
    absl::StrAppendFormat(&svg,
                          "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" "
                          "stroke-width=\"2\"/>\n",
                          points, line.color);
    for (size_t i = 0; i < line.values.size() && i < n; ++i) {
      absl::StrAppendFormat(&svg,
                            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>%s at "
                            "%s: %.4g</title></circle>\n",
                            x_at(i), y_at(line.values[i]), line.color, HtmlEscape(line.name),
                            HtmlEscape(x_labels[i]), line.values[i]);
    }
    const double legend_y = kTop + 10 + 20 * static_cast<double>(s);
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"%s\" "
        "stroke-width=\"3\"/><text x=\"%g\" y=\"%g\" class=\"legend\">%s</text>\n",
        kLeft + kPlotWidth + 14, legend_y, kLeft + kPlotWidth + 34, legend_y, line.color,
        kLeft + kPlotWidth + 40, legend_y + 4, HtmlEscape(line.name));
  }
  svg += "</svg>\n";
  return svg;
}

// Throughput and p99 of every measured window, in run order, against the measured time at each
// window's end (warm-ups and drains are not measured, so they are not on the axis), with the
// level in each point's tooltip label. Empty when no window was measured.
std::string OverTimeCharts(const RunResult& result, bool open) {
  std::vector<std::string> labels;
  Series rps{"completed req/s", "#1f77b4", {}};
  Series p99{"p99 ms", "#ff7f0e", {}};
  double t = 0;
  for (const LevelResult& level : result.levels) {
    for (const WindowSummary& w : level.windows) {
      t += w.duration_s;
      labels.push_back(absl::StrFormat("%.1f s", t));
      rps.values.push_back(w.throughput_rps);
      p99.values.push_back(w.p99_us / 1e3);
    }
  }
  if (labels.empty()) return "";
  std::string html = absl::StrCat(
      "<h2>Over time</h2>\n<p>One point per measured window, levels in run order (",
      absl::StrJoin(result.levels, ", ",
                    [open](std::string* out, const LevelResult& level) {
                      absl::StrAppend(out, LevelName(open), " ", LevelLabel(level, open), ": ",
                                      level.windows.size(), " windows");
                    }),
      ").</p>\n<div class=\"charts\">\n");
  html += LineChart("Throughput over time", "measured time", "requests per second", labels, {rps});
  html += LineChart("p99 latency over time", "measured time", "milliseconds", labels, {p99});
  html += "</div>\n";
  return html;
}

json LatencyJson(const LatencySummary& l) {
  return json{{"mean", l.mean_us}, {"min", l.min_us}, {"p50", l.p50_us},    {"p90", l.p90_us},
              {"p95", l.p95_us},   {"p99", l.p99_us}, {"p99.9", l.p999_us}, {"max", l.max_us}};
}

json LevelJson(const LevelResult& level) {
  json windows = json::array();
  for (const WindowSummary& w : level.windows) {
    windows.push_back({{"duration_s", w.duration_s},
                       {"succeeded", w.succeeded},
                       {"failed", w.failed},
                       {"throughput_rps", w.throughput_rps},
                       {"p99_us", w.p99_us}});
  }
  json errors = json::object();
  for (const auto& [code, count] : level.errors_by_code) {
    errors[absl::StatusCodeToString(code)] = {
        {"count", count},
        {"first_message", level.first_error_by_code.count(code) > 0
                              ? level.first_error_by_code.at(code)
                              : std::string()}};
  }
  json server = nullptr;
  if (level.server.available) {
    server = {{"requests", level.server.requests},
              {"failed", level.server.failed},
              {"queue_us", level.server.queue_us},
              {"compute_input_us", level.server.compute_input_us},
              {"compute_infer_us", level.server.compute_infer_us},
              {"compute_output_us", level.server.compute_output_us},
              {"total_us", level.server.total_us},
              {"avg_batch_size", level.server.avg_batch_size}};
  }
  return json{{"concurrency", level.concurrency},
              {"request_rate", level.request_rate},
              {"stable", level.stable},
              {"end_reason", level.end_reason},
              {"windows_run", level.windows.size()},
              {"windows_reported", level.windows_reported},
              {"duration_s", level.duration_s},
              {"succeeded", level.succeeded},
              {"failed", level.failed},
              {"sent", level.sent},
              {"sent_late", level.sent_late},
              {"skipped", level.skipped},
              {"throughput_rps", level.throughput_rps},
              {"inferences_per_s", level.inferences_per_s},
              {"tokens_per_s", level.tokens_per_s},
              {"mean_request_tokens", level.mean_request_tokens},
              {"sent_rps", level.sent_rps},
              {"latency_us", LatencyJson(level.latency)},
              {"failed_latency_us", LatencyJson(level.failed_latency)},
              {"errors", errors},
              {"server", server},
              {"windows", windows}};
}

}  // namespace

std::string FormatConsoleTable(const ReportContext& context, const RunResult& result) {
  std::string out = absl::StrCat("sluice-loadtest: model ", context.model, " (version ",
                                 VersionText(context), ") at ", context.url);
  if (!context.server.empty()) absl::StrAppend(&out, " [", context.server, "]");
  absl::StrAppend(&out, "\n", LoadText(context), ", batch ", context.batch_size, ", ",
                  context.inputs, " ", context.input_fill, ", ", context.request_bytes,
                  " B/request", SequenceLengthsText(context), "\n", WindowsText(context), "\n\n");

  const bool open = context.open_loop;
  absl::StrAppendFormat(&out, "%11s %10s %10s", open ? "rate/s" : "concurrency", "req/s",
                        "infer/s");
  if (context.counts_tokens) absl::StrAppendFormat(&out, " %10s", "tokens/s");
  absl::StrAppendFormat(&out, " %8s %8s %8s %8s %8s %8s %7s", "p50 ms", "p90 ms", "p95 ms",
                        "p99 ms", "p99.9 ms", "max ms", "errors");
  if (open) absl::StrAppendFormat(&out, " %9s %6s %7s", "sent/s", "late", "skipped");
  absl::StrAppendFormat(&out, " | %9s %9s %9s %9s %9s %6s | %s\n", "srv queue", "srv input",
                        "srv infer", "srv outpt", "srv total", "batch", "windows");
  for (const LevelResult& level : result.levels) {
    const LatencySummary& l = level.latency;
    absl::StrAppendFormat(&out, "%11s %10.1f %10.1f", LevelLabel(level, open), level.throughput_rps,
                          level.inferences_per_s);
    if (context.counts_tokens) absl::StrAppendFormat(&out, " %10.0f", level.tokens_per_s);
    absl::StrAppendFormat(&out, " %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %7d", l.p50_us / 1e3,
                          l.p90_us / 1e3, l.p95_us / 1e3, l.p99_us / 1e3, l.p999_us / 1e3,
                          l.max_us / 1e3, level.failed);
    if (open) {
      absl::StrAppendFormat(&out, " %9.1f %6d %7d", level.sent_rps, level.sent_late, level.skipped);
    }
    if (ServerCounted(level.server)) {
      absl::StrAppendFormat(&out, " | %9.1f %9.1f %9.1f %9.1f %9.1f %6.2f", level.server.queue_us,
                            level.server.compute_input_us, level.server.compute_infer_us,
                            level.server.compute_output_us, level.server.total_us,
                            level.server.avg_batch_size);
    } else {
      absl::StrAppendFormat(&out, " | %9s %9s %9s %9s %9s %6s", "-", "-", "-", "-", "-", "-");
    }
    absl::StrAppend(&out, " | ", WindowsColumn(level), "\n");
  }
  absl::StrAppend(&out,
                  "(srv columns: average microseconds per request from ModelStatistics, '-' when "
                  "the server counted nothing; batch: items per model execution",
                  context.counts_tokens ? "; tokens/s: real tokens of the successful requests" : "",
                  ")\n");
  for (const LevelResult& level : result.levels) {
    for (const auto& [code, count] : level.errors_by_code) {
      absl::StrAppend(
          &out, "errors at ", LevelName(open), " ", LevelLabel(level, open), ": ",
          absl::StatusCodeToString(code), " x", count, " (first: ",
          level.first_error_by_code.count(code) > 0 ? level.first_error_by_code.at(code) : "",
          ")\n");
    }
    if (level.failed > 0) {
      const LatencySummary& f = level.failed_latency;
      absl::StrAppendFormat(&out,
                            "failed requests at %s %s answered in: p50 %.3f ms, p99 %.3f ms, "
                            "max %.3f ms\n",
                            LevelName(open), LevelLabel(level, open), f.p50_us / 1e3,
                            f.p99_us / 1e3, f.max_us / 1e3);
    }
  }
  absl::StrAppendFormat(&out, "total: %d requests sent, %d succeeded, %d failed in %.1f s",
                        result.totals.sent, result.totals.succeeded, result.totals.failed,
                        result.totals.duration_s);
  if (open) {
    absl::StrAppendFormat(&out, "; not sent on time: %d late (> %d us), %d skipped (cap reached)",
                          result.totals.sent_late, kLateThresholdUs, result.totals.skipped);
  }
  absl::StrAppend(&out, "\n");
  if (!result.early_stop.ok()) {
    absl::StrAppend(&out, "stopped early: ", result.early_stop.message(), "\n");
  }
  return out;
}

std::string FormatCsv(const ReportContext& context, const RunResult& result) {
  std::string out =
      "concurrency,request_rate,mode,batch_size,windows,stable,end_reason,duration_s,succeeded,"
      "failed,sent,sent_late,skipped,throughput_rps,inferences_per_s,tokens_per_s,sent_rps,"
      "latency_mean_us,"
      "latency_min_us,p50_us,p90_us,p95_us,p99_us,p999_us,max_us,server_requests,server_queue_us,"
      "server_compute_input_us,server_compute_infer_us,server_compute_output_us,server_total_us,"
      "server_avg_batch_size,errors\n";
  for (const LevelResult& level : result.levels) {
    const LatencySummary& l = level.latency;
    absl::StrAppendFormat(
        &out,
        "%d,%g,%s,%d,%d,%d,%s,%.3f,%d,%d,%d,%d,%d,%.2f,%.2f,%.2f,%.2f,%.1f,%.1f,%.1f,%.1f,%.1f,"
        "%.1f,%.1f,%.1f,",
        level.concurrency, level.request_rate, LoadModeName(context.mode), context.batch_size,
        level.windows.size(), level.stable ? 1 : 0, CsvField(level.end_reason), level.duration_s,
        level.succeeded, level.failed, level.sent, level.sent_late, level.skipped,
        level.throughput_rps, level.inferences_per_s, level.tokens_per_s, level.sent_rps, l.mean_us,
        l.min_us, l.p50_us, l.p90_us, l.p95_us, l.p99_us, l.p999_us, l.max_us);
    if (level.server.available) {
      absl::StrAppendFormat(&out, "%d,%.1f,%.1f,%.1f,%.1f,%.1f,%.3f,", level.server.requests,
                            level.server.queue_us, level.server.compute_input_us,
                            level.server.compute_infer_us, level.server.compute_output_us,
                            level.server.total_us, level.server.avg_batch_size);
    } else {
      out += ",,,,,,,";
    }
    absl::StrAppend(&out, CsvField(ErrorCounts(level)), "\n");
  }
  return out;
}

std::string FormatJson(const ReportContext& context, const RunResult& result) {
  json levels = json::array();
  for (const LevelResult& level : result.levels) levels.push_back(LevelJson(level));
  json doc = {
      {"tool", "sluice-loadtest"},
      {"started_at", context.started_at},
      {"command_line", context.command_line},
      {"config",
       {{"url", context.url},
        {"server", context.server},
        {"model", context.model},
        {"model_version", context.model_version},
        {"mode", LoadModeName(context.mode)},
        {"load", context.open_loop ? "request_rate" : "concurrency"},
        {"arrivals", context.open_loop ? json(ArrivalProcessName(context.arrivals)) : json()},
        {"batch_size", context.batch_size},
        {"inputs", context.inputs},
        {"input_fill", context.input_fill},
        {"request_bytes", context.request_bytes},
        {"counts_tokens", context.counts_tokens},
        {"sequence_lengths", context.sequence_lengths},
        {"warmup_ms", context.warmup_ms},
        {"window_ms", context.window_ms},
        {"stability_percent", context.stability_percent},
        {"stability_windows", kStabilityWindows},
        {"max_windows", context.max_windows},
        {"late_threshold_us", kLateThresholdUs}}},
      {"levels", levels},
      {"totals",
       {{"sent", result.totals.sent},
        {"succeeded", result.totals.succeeded},
        {"tokens", result.totals.succeeded_tokens},
        {"failed", result.totals.failed},
        {"sent_late", result.totals.sent_late},
        {"skipped", result.totals.skipped},
        {"duration_s", result.totals.duration_s}}},
      {"early_stop",
       result.early_stop.ok() ? json() : json(std::string(result.early_stop.message()))}};
  return doc.dump(2) + "\n";
}

std::string FormatHtml(const ReportContext& context, const RunResult& result) {
  const bool open = context.open_loop;
  std::vector<std::string> x_labels;
  Series throughput{"completed req/s", "#1f77b4", {}};
  Series inferences{"inferences/s", "#2ca02c", {}};
  Series offered{"sent req/s", "#7f7f7f", {}};
  Series p50{"p50", "#2ca02c", {}}, p90{"p90", "#1f77b4", {}}, p99{"p99", "#ff7f0e", {}},
      p999{"p99.9", "#d62728", {}};
  for (const LevelResult& level : result.levels) {
    x_labels.push_back(LevelLabel(level, open));
    throughput.values.push_back(level.throughput_rps);
    inferences.values.push_back(level.inferences_per_s);
    offered.values.push_back(level.sent_rps);
    p50.values.push_back(level.latency.p50_us / 1e3);
    p90.values.push_back(level.latency.p90_us / 1e3);
    p99.values.push_back(level.latency.p99_us / 1e3);
    p999.values.push_back(level.latency.p999_us / 1e3);
  }
  std::vector<Series> throughput_series = {throughput};
  if (context.batch_size > 1) throughput_series.push_back(inferences);
  if (open) throughput_series.push_back(offered);

  std::string html = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta "
      "charset=\"utf-8\">\n<title>sluice-loadtest: ",
      HtmlEscape(context.model),
      "</title>\n<style>\n"
      "body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;"
      "color:#222;max-width:1400px}\n"
      "h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}\n"
      "table{border-collapse:collapse;font-size:0.85em}\n"
      "th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}\n"
      "th{background:#f3f3f3}td.l,th.l{text-align:left}\n"
      // The results table has up to 21 columns: its headers wrap (\"server queue us\" on two
      // lines), numbers do not, and the error text wraps, so that it fits 1,400 px; a narrower
      // window scrolls the table rather than clipping it.
      ".wide{max-width:100%;overflow-x:auto}\n"
      "table.results th{white-space:normal;vertical-align:bottom;min-width:3.5em}\n"
      "table.results td{white-space:nowrap}table.results td.l{white-space:normal;"
      "min-width:12em}\n"
      ".charts{display:flex;flex-wrap:wrap;gap:16px}\n"
      "svg{border:1px solid #ddd;background:#fff}\n"
      "svg .grid{stroke:#e6e6e6}svg .axis{stroke:#555}\n"
      "svg text{font-size:12px;fill:#333}svg .title{font-size:14px;font-weight:600}\n"
      "svg .ytick{text-anchor:end}svg .xtick,svg .xtitle,svg .ytitle{text-anchor:middle}\n"
      ".warn{color:#a00}\n"
      "</style>\n</head>\n<body>\n<h1>sluice-loadtest: ",
      HtmlEscape(context.model), "</h1>\n<table>\n");
  auto row = [&](absl::string_view key, absl::string_view value) {
    absl::StrAppend(&html, "<tr><th class=\"l\">", HtmlEscape(key), "</th><td class=\"l\">",
                    HtmlEscape(value), "</td></tr>\n");
  };
  row("server", absl::StrCat(context.url, context.server.empty() ? "" : " (", context.server,
                             context.server.empty() ? "" : ")"));
  row("model", absl::StrCat(context.model, " (version ", VersionText(context), ")"));
  row("load", LoadText(context));
  row("request",
      absl::StrCat("batch ", context.batch_size, ", ", context.inputs, " ", context.input_fill,
                   ", ", context.request_bytes, " bytes", SequenceLengthsText(context)));
  row("measurement", WindowsText(context));
  row("started", context.started_at);
  row("command", context.command_line);
  row("totals",
      absl::StrFormat("%d requests sent, %d succeeded, %d failed in %.1f s", result.totals.sent,
                      result.totals.succeeded, result.totals.failed, result.totals.duration_s));
  html += "</table>\n";
  if (!result.early_stop.ok()) {
    absl::StrAppend(&html,
                    "<p class=\"warn\">Stopped early: ", HtmlEscape(result.early_stop.message()),
                    "</p>\n");
  }
  html += "<h2>Charts</h2>\n<div class=\"charts\">\n";
  html +=
      LineChart("Throughput", LevelName(open), "requests per second", x_labels, throughput_series);
  html += LineChart("Latency percentiles", LevelName(open), "milliseconds", x_labels,
                    {p50, p90, p99, p999});
  html += "</div>\n";
  html += OverTimeCharts(result, open);
  html += "<h2>Results</h2>\n<div class=\"wide\"><table class=\"results\">\n<tr>";
  std::vector<std::string> headers = {open ? "rate/s" : "concurrency",
                                      "req/s",
                                      "infer/s",
                                      "tokens/s",
                                      "mean ms",
                                      "p50 ms",
                                      "p90 ms",
                                      "p95 ms",
                                      "p99 ms",
                                      "p99.9 ms",
                                      "max ms",
                                      "failed"};
  if (open) {
    for (const char* h : {"sent/s", "late", "skipped"}) headers.push_back(h);
  }
  for (const char* h : {"server queue us", "server input us", "server infer us", "server output us",
                        "server total us", "batch", "windows", "errors"}) {
    headers.push_back(h);
  }
  for (const std::string& h : headers) absl::StrAppend(&html, "<th>", HtmlEscape(h), "</th>");
  html += "</tr>\n";
  for (const LevelResult& level : result.levels) {
    const LatencySummary& l = level.latency;
    html += "<tr>";
    auto cell = [&](const std::string& text) {
      absl::StrAppend(&html, "<td>", HtmlEscape(text), "</td>");
    };
    cell(LevelLabel(level, open));
    cell(absl::StrFormat("%.1f", level.throughput_rps));
    cell(absl::StrFormat("%.1f", level.inferences_per_s));
    cell(context.counts_tokens ? absl::StrFormat("%.0f", level.tokens_per_s) : "-");
    for (double us : {l.mean_us, l.p50_us, l.p90_us, l.p95_us, l.p99_us, l.p999_us, l.max_us}) {
      cell(absl::StrFormat("%.3f", us / 1e3));
    }
    cell(absl::StrCat(level.failed));
    if (open) {
      cell(absl::StrFormat("%.1f", level.sent_rps));
      cell(absl::StrCat(level.sent_late));
      cell(absl::StrCat(level.skipped));
    }
    if (ServerCounted(level.server)) {
      for (double us :
           {level.server.queue_us, level.server.compute_input_us, level.server.compute_infer_us,
            level.server.compute_output_us, level.server.total_us}) {
        cell(absl::StrFormat("%.1f", us));
      }
      cell(absl::StrFormat("%.2f", level.server.avg_batch_size));
    } else {
      for (int i = 0; i < 6; ++i) cell("-");
    }
    cell(WindowsColumn(level));
    absl::StrAppend(&html, "<td class=\"l\">", HtmlEscape(ErrorCounts(level)), "</td></tr>\n");
  }
  html +=
      "</table></div>\n<p>Latency is measured by the client per request (send to answer), over the "
      "last windows of each level; server columns are ModelStatistics averages per request "
      "over the same windows.</p>\n</body>\n</html>\n";
  return html;
}

absl::Status WriteTextFile(const std::string& path, absl::string_view contents) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  file.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  file.close();
  if (!file) return absl::DataLossError(absl::StrCat("error writing ", path));
  return absl::OkStatus();
}

}  // namespace sluice::loadtest
