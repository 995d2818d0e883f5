#include "loadtest/load_sweep.h"

#include <cmath>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace sluice::loadtest {
namespace {

absl::Status Malformed(absl::string_view spec, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad sweep '", spec, "': ", why,
                   " (expected N, START:END, START:END:xFACTOR or START:END:+STEP)"));
}

absl::StatusOr<double> ParsePositive(absl::string_view spec, absl::string_view text,
                                     absl::string_view what) {
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value)) {
    return Malformed(spec, absl::StrCat(what, " '", text, "' is not a number"));
  }
  if (value <= 0) return Malformed(spec, absl::StrCat(what, " must be > 0"));
  return value;
}

}  // namespace

absl::StatusOr<std::vector<double>> ParseSweep(absl::string_view spec) {
  const std::vector<absl::string_view> parts = absl::StrSplit(spec, ':');
  if (parts.size() > 3) return Malformed(spec, "too many ':'");
  absl::StatusOr<double> start = ParsePositive(spec, parts[0], "start");
  if (!start.ok()) return start.status();
  if (parts.size() == 1) return std::vector<double>{*start};

  absl::StatusOr<double> end = ParsePositive(spec, parts[1], "end");
  if (!end.ok()) return end.status();
  if (*end < *start) return Malformed(spec, "end is below start");

  bool geometric = false;
  double step = 1;
  if (parts.size() == 3) {
    absl::string_view step_text = parts[2];
    if (absl::ConsumePrefix(&step_text, "x") || absl::ConsumePrefix(&step_text, "*")) {
      geometric = true;
    } else {
      absl::ConsumePrefix(&step_text, "+");
    }
    absl::StatusOr<double> parsed = ParsePositive(spec, step_text, geometric ? "factor" : "step");
    if (!parsed.ok()) return parsed.status();
    step = *parsed;
    if (geometric && step <= 1) return Malformed(spec, "factor must be > 1");
  }

  std::vector<double> levels;
  // A relative tolerance so that 0.1:0.3:+0.1 includes 0.3 despite rounding.
  const double tolerance = *end * 1e-9;
  for (int i = 0;; ++i) {
    const double level = geometric ? *start * std::pow(step, i) : *start + step * i;
    if (level > *end + tolerance) break;
    if (static_cast<int>(levels.size()) == kMaxSweepLevels) {
      return Malformed(spec, absl::StrCat("more than ", kMaxSweepLevels, " levels"));
    }
    levels.push_back(level);
  }
  return levels;
}

absl::StatusOr<std::vector<int64_t>> ParseIntegerSweep(absl::string_view spec, int64_t max_value) {
  absl::StatusOr<std::vector<double>> levels = ParseSweep(spec);
  if (!levels.ok()) return levels.status();
  std::vector<int64_t> integers;
  integers.reserve(levels->size());
  for (double level : *levels) {
    const double rounded = std::round(level);
    if (std::abs(level - rounded) > 1e-9) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad sweep '", spec, "': level ", level, " is not a whole number"));
    }
    if (rounded < 1 || rounded > static_cast<double>(max_value)) {
      return absl::InvalidArgumentError(absl::StrCat("bad sweep '", spec, "': level ", rounded,
                                                     " is outside [1, ", max_value, "]"));
    }
    integers.push_back(static_cast<int64_t>(rounded));
  }
  return integers;
}

}  // namespace sluice::loadtest
