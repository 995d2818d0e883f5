#pragma once

// Reading the small JSON files of a checkpoint folder (config.json, modules.json, the
// sentence-transformers modules' configs) with bounded size and errors that name the file and the
// field: shared by the network loader and the sentence-transformers modules.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace sluice::engine::models::encoder {

using Json = nlohmann::json;

// A configuration file larger than this is refused (a bound on what a hostile folder makes the
// load read; real ones are a few KiB).
inline constexpr int64_t kMaxJsonFileBytes = int64_t{4} << 20;

// The file's bytes; NotFound when it cannot be read, InvalidArgument over kMaxJsonFileBytes.
absl::StatusOr<std::string> ReadSmallFile(const std::filesystem::path& path);

// The file as a JSON object (InvalidArgument naming the file when it is not one).
absl::StatusOr<Json> ReadJsonFile(const std::filesystem::path& path);

// An integer field in [min, max]; `fallback` when absent (nullopt: required).
absl::StatusOr<int64_t> IntField(const Json& json, const std::filesystem::path& path,
                                 const char* key, std::optional<int64_t> fallback, int64_t min,
                                 int64_t max);

// A string field; `fallback` when absent (nullopt: required).
absl::StatusOr<std::string> StringField(const Json& json, const std::filesystem::path& path,
                                        const char* key, std::optional<std::string> fallback);

// A boolean field, false when absent or not a boolean.
bool BoolField(const Json& json, const char* key);

// InvalidArgument "'<path>': \"<key>\" <what>": the error of a field that is present but wrong.
absl::Status FieldError(const std::filesystem::path& path, const char* key,
                        const std::string& what);

// A boolean field; `fallback` when absent or null. Unlike BoolField, a value that is not a
// boolean is an error (InvalidArgument "is not a boolean"), for fields whose misspelling would
// silently change the numerics (ModernBERT's and Qwen3's biases).
absl::StatusOr<bool> StrictBoolField(const Json& json, const std::filesystem::path& path,
                                     const char* key, bool fallback);

// A positive, finite number (rope thetas); `fallback` when absent or null, else InvalidArgument
// "must be a positive number".
absl::StatusOr<double> PositiveNumberField(const Json& json, const std::filesystem::path& path,
                                           const char* key, double fallback);

}  // namespace sluice::engine::models::encoder
