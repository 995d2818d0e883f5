#include "text/json_util.h"

namespace sluice::text {

absl::StatusOr<std::string> JsonString(const Json& object, const char* key,
                                       const std::string& fallback, const JsonPath& at) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    return fallback;
  }
  if (!it->is_string()) {
    return at.Error(absl::StrCat("'", key, "' is not a string"));
  }
  return it->get<std::string>();
}

absl::StatusOr<bool> JsonBool(const Json& object, const char* key, bool fallback,
                              const JsonPath& at) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    return fallback;
  }
  if (!it->is_boolean()) {
    return at.Error(absl::StrCat("'", key, "' is not a boolean"));
  }
  return it->get<bool>();
}

absl::StatusOr<int64_t> JsonInt(const Json& object, const char* key, int64_t fallback,
                                const JsonPath& at) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    return fallback;
  }
  if (!it->is_number_integer()) {
    return at.Error(absl::StrCat("'", key, "' is not an integer"));
  }
  return it->get<int64_t>();
}

absl::StatusOr<const Json*> JsonMember(const Json& object, const char* key, const JsonPath& at) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    return at.Error(absl::StrCat("has no '", key, "'"));
  }
  return &*it;
}

absl::StatusOr<std::string> JsonType(const Json& component, const JsonPath& at) {
  if (!component.is_object()) {
    return at.Error("is not an object");
  }
  auto it = component.find("type");
  if (it == component.end() || !it->is_string()) {
    return at.Error("has no \"type\"");
  }
  return it->get<std::string>();
}

absl::Status Unsupported(const std::string& type, const JsonPath& at) {
  return at.Error(absl::StrCat("type '", type, "' is not supported"));
}

}  // namespace sluice::text
