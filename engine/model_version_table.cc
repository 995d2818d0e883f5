#include "engine/model_version_table.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/model_scheduler.h"

namespace sluice::engine {
namespace {

std::string VersionText(int64_t version) {
  return version < 0 ? std::string("(newest)") : absl::StrCat(version);
}

}  // namespace

absl::string_view ModelStateName(ModelState state) {
  switch (state) {
    case ModelState::kLoading:
      return "LOADING";
    case ModelState::kReady:
      return "READY";
    case ModelState::kUnloading:
      return "UNLOADING";
    case ModelState::kUnavailable:
      return "UNAVAILABLE";
  }
  return "UNKNOWN";
}

LoadedVersion::LoadedVersion(ModelStatsOptions stats_options) : stats(std::move(stats_options)) {}

LoadedVersion::~LoadedVersion() = default;

std::shared_ptr<LoadedVersion> ModelVersionTable::Install(const std::string& name, int64_t version,
                                                          std::shared_ptr<LoadedVersion> loaded) {
  common::MutexLock lock(&mu_);
  if (auto failed = failures_.find(name); failed != failures_.end()) {
    failed->second.erase(version);
    failed->second.erase(kWholeModel);
    if (failed->second.empty()) failures_.erase(failed);
  }
  Entry& entry = models_[name][version];
  std::shared_ptr<LoadedVersion> replaced = std::move(entry.loaded);
  entry = Entry{.loaded = std::move(loaded), .fault = {}};
  return replaced;
}

void ModelVersionTable::RecordLoadFailure(const std::string& name, int64_t version,
                                          std::string reason) {
  common::MutexLock lock(&mu_);
  std::map<int64_t, std::string>& failures = failures_[name];
  if (version == kWholeModel) {
    failures.clear();
  } else {
    failures.erase(kWholeModel);
  }
  failures[version] = std::move(reason);
}

bool ModelVersionTable::MarkFaulted(const std::string& name, const LoadedVersion& loaded,
                                    std::string reason) {
  common::MutexLock lock(&mu_);
  auto it = models_.find(name);
  if (it == models_.end()) return true;
  auto v = it->second.find(loaded.version);
  if (v == it->second.end() || v->second.loaded.get() != &loaded) return true;  // replaced
  if (!v->second.fault.empty()) return false;  // another instance faulted first
  v->second.fault = std::move(reason);
  return true;
}

absl::StatusOr<ModelVersionTable::Versions> ModelVersionTable::RemoveModel(
    const std::string& name) {
  common::MutexLock lock(&mu_);
  auto it = models_.find(name);
  const bool had_failures = failures_.erase(name) > 0;
  Versions removed;
  if (it == models_.end()) {
    if (had_failures) return removed;
    return absl::NotFoundError(absl::StrCat("model '", name, "' is not loaded"));
  }
  for (auto& [version, entry] : it->second) removed[version] = std::move(entry.loaded);
  models_.erase(it);
  return removed;
}

absl::StatusOr<std::shared_ptr<LoadedVersion>> ModelVersionTable::RemoveVersion(
    const std::string& name, int64_t version) {
  common::MutexLock lock(&mu_);
  if (auto failed = failures_.find(name); failed != failures_.end()) {
    failed->second.erase(version);
    if (failed->second.empty()) failures_.erase(failed);
  }
  auto it = models_.find(name);
  if (it == models_.end() || it->second.count(version) == 0) {
    return absl::NotFoundError(
        absl::StrCat("model '", name, "' version ", version, " is not loaded"));
  }
  std::shared_ptr<LoadedVersion> removed = std::move(it->second[version].loaded);
  it->second.erase(version);
  if (it->second.empty()) models_.erase(it);
  return removed;
}

std::map<std::string, ModelVersionTable::Versions> ModelVersionTable::RemoveAll() {
  std::map<std::string, std::map<int64_t, Entry>> models;
  {
    common::MutexLock lock(&mu_);
    models.swap(models_);
  }
  std::map<std::string, Versions> removed;
  for (auto& [name, versions] : models) {
    for (auto& [version, entry] : versions) removed[name][version] = std::move(entry.loaded);
  }
  return removed;
}

absl::StatusOr<std::shared_ptr<LoadedVersion>> ModelVersionTable::Resolve(const std::string& name,
                                                                          int64_t version,
                                                                          bool faulted_ok) const {
  common::MutexLock lock(&mu_);
  auto faulted = [&](const Entry& entry) {
    return absl::UnavailableError(absl::StrCat("model '", name, "' version ", entry.loaded->version,
                                               " is not ready: ", entry.fault));
  };
  auto it = models_.find(name);
  const bool any_loaded = it != models_.end() && !it->second.empty();
  if (any_loaded && version < 0) {
    // The newest version that has not faulted.
    for (auto v = it->second.rbegin(); v != it->second.rend(); ++v) {
      if (v->second.fault.empty()) return v->second.loaded;
    }
    if (faulted_ok) return it->second.rbegin()->second.loaded;
    return faulted(it->second.rbegin()->second);
  }
  if (any_loaded) {
    auto v = it->second.find(version);
    if (v != it->second.end()) {
      if (!v->second.fault.empty() && !faulted_ok) return faulted(v->second);
      return v->second.loaded;
    }
  }
  // A version that failed to load is UNAVAILABLE (with the reason), not unknown.
  if (const std::string* reason = LoadFailure(name, version); reason != nullptr) {
    // A whole-model failure (its config) concerns no version in particular.
    const bool whole_model = failures_.at(name).count(kWholeModel) > 0;
    return absl::UnavailableError(absl::StrCat(
        "model '", name, "'", whole_model ? "" : absl::StrCat(" version ", VersionText(version)),
        " is not ready: ", *reason));
  }
  if (!any_loaded && failures_.count(name) == 0) {
    return absl::NotFoundError(absl::StrCat("unknown model '", name, "'"));
  }
  return absl::NotFoundError(absl::StrCat("model '", name, "' has no version ", version));
}

const std::string* ModelVersionTable::LoadFailure(const std::string& name, int64_t version) const {
  auto failed = failures_.find(name);
  if (failed == failures_.end() || failed->second.empty()) return nullptr;
  if (auto whole = failed->second.find(kWholeModel); whole != failed->second.end()) {
    return &whole->second;
  }
  if (version < 0) return &failed->second.rbegin()->second;
  auto reason = failed->second.find(version);
  return reason == failed->second.end() ? nullptr : &reason->second;
}

std::vector<int64_t> ModelVersionTable::ReadyVersions(const std::string& name) const {
  std::vector<int64_t> ready;
  common::MutexLock lock(&mu_);
  auto it = models_.find(name);
  if (it != models_.end()) {
    for (const auto& [version, entry] : it->second) {
      if (entry.fault.empty()) ready.push_back(version);
    }
  }
  return ready;
}

std::vector<ModelVersionStatus> ModelVersionTable::List() const {
  std::vector<ModelVersionStatus> out;
  common::MutexLock lock(&mu_);
  for (const auto& [name, versions] : models_) {
    for (const auto& [version, entry] : versions) {
      if (entry.fault.empty()) {
        out.push_back({name, version, ModelState::kReady, ""});
      } else {
        out.push_back({name, version, ModelState::kUnavailable, entry.fault});
      }
    }
  }
  for (const auto& [name, versions] : failures_) {
    auto loaded = models_.find(name);
    for (const auto& [version, reason] : versions) {
      if (loaded != models_.end() && loaded->second.count(version) > 0) {
        // A failed reload: the previous load of this version still serves (or faulted).
        for (ModelVersionStatus& status : out) {
          if (status.name != name || status.version != version) continue;
          status.reason =
              status.state == ModelState::kReady
                  ? absl::StrCat("reload failed, previous load serving: ", reason)
                  : absl::StrCat("reload failed: ", reason, "; previous load: ", status.reason);
        }
        continue;
      }
      out.push_back({name, version, ModelState::kUnavailable, reason});
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::tie(a.name, a.version) < std::tie(b.name, b.version);
  });
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<LoadedVersion>>> ModelVersionTable::Select(
    const std::string& name, int64_t version) const {
  std::vector<std::pair<std::string, std::shared_ptr<LoadedVersion>>> selected;
  common::MutexLock lock(&mu_);
  for (const auto& [model_name, versions] : models_) {
    if (!name.empty() && model_name != name) continue;
    for (const auto& [v, entry] : versions) {
      if (version >= 0 && v != version) continue;
      selected.emplace_back(model_name, entry.loaded);
    }
  }
  return selected;
}

}  // namespace sluice::engine
