#include "common/byte_size.h"

#include <array>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace sluice {
namespace {

struct Unit {
  const char* name;  // lower case, as matched
  int64_t bytes;
};

constexpr int64_t kKi = int64_t{1} << 10;
constexpr std::array<Unit, 17> kUnits = {{
    {"", 1},
    {"b", 1},
    {"kib", kKi},
    {"mib", kKi << 10},
    {"gib", kKi << 20},
    {"tib", kKi << 30},
    {"pib", kKi << 40},
    {"k", kKi},
    {"m", kKi << 10},
    {"g", kKi << 20},
    {"t", kKi << 30},
    {"p", kKi << 40},
    {"kb", 1000},
    {"mb", 1000 * 1000},
    {"gb", int64_t{1000} * 1000 * 1000},
    {"tb", int64_t{1000} * 1000 * 1000 * 1000},
    {"pb", int64_t{1000} * 1000 * 1000 * 1000 * 1000},
}};

absl::Status Invalid(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("'", text, "' is not a byte size (", why,
                   "): write a whole number with an optional unit, e.g. 1048576, 512KiB, "
                   "64MiB, 4GiB (KiB/MiB/GiB/TiB are powers of 1024, kB/MB/GB/TB of 1000)"));
}

}  // namespace

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < rest.size() && absl::ascii_isdigit(static_cast<unsigned char>(rest[digits]))) {
    ++digits;
  }
  if (digits == 0) return Invalid(text, "no number");
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t number = 0;
  for (size_t i = 0; i < digits; ++i) {
    const int digit = rest[i] - '0';
    if (number > (kMax - digit) / 10) return Invalid(text, "too large");
    number = number * 10 + digit;
  }
  const std::string unit =
      absl::AsciiStrToLower(absl::StripLeadingAsciiWhitespace(rest.substr(digits)));
  for (const Unit& u : kUnits) {
    if (unit != u.name) continue;
    if (number > kMax / u.bytes) return Invalid(text, "too large");
    return number * u.bytes;
  }
  return Invalid(text, absl::StrCat("unknown unit '", unit, "'"));
}

std::string FormatByteSize(int64_t bytes) {
  CHECK(bytes >= 0);
  static constexpr std::array<const char*, 6> kNames = {"", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes == 0) return "0";
  size_t unit = 0;
  while (unit + 1 < kNames.size() && bytes % kKi == 0) {
    bytes /= kKi;
    ++unit;
  }
  return unit == 0 ? absl::StrCat(bytes) : absl::StrCat(bytes, " ", kNames[unit]);
}

}  // namespace sluice
