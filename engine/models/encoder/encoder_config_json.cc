#include "engine/models/encoder/encoder_config_json.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace sluice::engine::models::encoder {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadSmallFile(const fs::path& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) {
    return absl::NotFoundError(absl::StrCat("cannot read '", path.string(), "': ", ec.message()));
  }
  if (static_cast<int64_t>(size) > kMaxJsonFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("'", path.string(), "' is ", size,
                                                   " bytes, over the limit of ", kMaxJsonFileBytes,
                                                   " for a JSON configuration file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open '", path.string(), "': ", std::strerror(errno)));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

absl::StatusOr<Json> ReadJsonFile(const fs::path& path) {
  ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path));
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("'", path.string(), "' is not a JSON object"));
  }
  return json;
}

absl::StatusOr<int64_t> IntField(const Json& json, const fs::path& path, const char* key,
                                 std::optional<int64_t> fallback, int64_t min, int64_t max) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) {
    if (fallback.has_value()) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat("'", path.string(), "' has no \"", key, "\""));
  }
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path.string(), "': \"", key, "\" is not an integer"));
  }
  const int64_t value = it->get<int64_t>();
  if (value < min || value > max) {
    return absl::InvalidArgumentError(absl::StrCat("'", path.string(), "': \"", key, "\" = ", value,
                                                   " is outside [", min, ", ", max, "]"));
  }
  return value;
}

absl::StatusOr<std::string> StringField(const Json& json, const fs::path& path, const char* key,
                                        std::optional<std::string> fallback) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) {
    if (fallback.has_value()) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat("'", path.string(), "' has no \"", key, "\""));
  }
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path.string(), "': \"", key, "\" is not a string"));
  }
  return it->get<std::string>();
}

bool BoolField(const Json& json, const char* key) {
  auto it = json.find(key);
  return it != json.end() && it->is_boolean() && it->get<bool>();
}

absl::Status FieldError(const fs::path& path, const char* key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("'", path.string(), "': \"", key, "\" ", what));
}

absl::StatusOr<bool> StrictBoolField(const Json& json, const fs::path& path, const char* key,
                                     bool fallback) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return FieldError(path, key, "is not a boolean");
  return it->get<bool>();
}

absl::StatusOr<double> PositiveNumberField(const Json& json, const fs::path& path, const char* key,
                                           double fallback) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return fallback;
  if (!it->is_number() || !(it->get<double>() > 0) || !std::isfinite(it->get<double>())) {
    return FieldError(path, key, "must be a positive number");
  }
  return it->get<double>();
}

}  // namespace sluice::engine::models::encoder
