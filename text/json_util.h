#pragma once

// Reading tokenizer.json components: typed members with defaults, and load errors that name the
// file and the component's path in it ("tokenizer.json: pre_tokenizer.pretokenizers[1]: ...").
// Internal to text/. Stateless; thread-safe.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace sluice::text {

using Json = nlohmann::json;

// Where a component sits: the file (for messages) and its JSON path in it.
struct JsonPath {
  absl::string_view source;  // e.g. "tokenizer.json" or a file path
  std::string path;          // e.g. "normalizer.normalizers[2]"

  JsonPath Child(absl::string_view key) const {
    return {source, path.empty() ? std::string(key) : absl::StrCat(path, ".", key)};
  }
  JsonPath Index(size_t i) const { return {source, absl::StrCat(path, "[", i, "]")}; }
  // InvalidArgument "<source>: <path>: <what>".
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", path, ": ", what));
  }
};

// Member `key` of `object`: `fallback` when absent or null, an error naming it when mistyped.
absl::StatusOr<std::string> JsonString(const Json& object, const char* key,
                                       const std::string& fallback, const JsonPath& at);
absl::StatusOr<bool> JsonBool(const Json& object, const char* key, bool fallback,
                              const JsonPath& at);
absl::StatusOr<int64_t> JsonInt(const Json& object, const char* key, int64_t fallback,
                                const JsonPath& at);
// A required member (present and not null).
absl::StatusOr<const Json*> JsonMember(const Json& object, const char* key, const JsonPath& at);
// The "type" of a component object.
absl::StatusOr<std::string> JsonType(const Json& component, const JsonPath& at);
// "type 'X' is not supported" with the path.
absl::Status Unsupported(const std::string& type, const JsonPath& at);

}  // namespace sluice::text
