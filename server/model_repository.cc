#include "server/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/model_config_parser.h"

namespace sluice::server {
namespace fs = std::filesystem;

namespace {

absl::StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Numeric version folders of a model, ascending.
std::vector<int64_t> ListVersions(const fs::path& model_dir) {
  std::vector<int64_t> versions;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(model_dir, ec)) {
    int64_t version = 0;
    if (entry.is_directory(ec) && absl::SimpleAtoi(entry.path().filename().string(), &version) &&
        version > 0) {
      versions.push_back(version);
    }
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

// Triton's version_policy: latest N (default latest 1), all, or specific versions.
absl::StatusOr<std::vector<int64_t>> SelectVersions(const inference::ModelConfig& config,
                                                    const std::vector<int64_t>& available,
                                                    const std::string& name) {
  if (available.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "model '", name, "' has no version folders (numeric sub-directories such as 1/)"));
  }
  const auto& policy = config.version_policy();
  if (policy.has_all()) return available;
  if (policy.has_specific()) {
    std::vector<int64_t> selected;
    for (int64_t version : policy.specific().versions()) {
      if (std::find(available.begin(), available.end(), version) == available.end()) {
        return absl::NotFoundError(absl::StrCat("model '", name,
                                                "': version_policy asks for version ", version,
                                                " but there is no folder ", version, "/"));
      }
      selected.push_back(version);
    }
    std::sort(selected.begin(), selected.end());
    selected.erase(std::unique(selected.begin(), selected.end()), selected.end());
    return selected;
  }
  uint32_t latest = 1;
  if (policy.has_latest()) {
    latest = policy.latest().num_versions();
    if (latest == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", name, "': version_policy latest.num_versions must be >= 1"));
    }
  }
  const size_t keep = std::min<size_t>(latest, available.size());
  return std::vector<int64_t>(available.end() - static_cast<ptrdiff_t>(keep), available.end());
}

}  // namespace

absl::Status ModelRepository::ValidateModelName(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat("invalid model name '", name, "'"));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid model name '", name, "': only letters, digits, '_', '-' and '.' are allowed"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ModelRepository>> ModelRepository::Create(const std::string& root,
                                                                         engine::Engine* engine,
                                                                         common::Logger* logger) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::NotFoundError(absl::StrCat("model repository '", root, "' is not a directory"));
  }
  return std::unique_ptr<ModelRepository>(
      new ModelRepository(fs::canonical(root, ec).string(), engine, logger));
}

ModelRepository::ModelRepository(std::string root, engine::Engine* engine, common::Logger* logger)
    : root_(std::move(root)), engine_(engine), logger_(logger) {}

std::vector<std::string> ModelRepository::ListModelNames() const {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory(ec) && ValidateModelName(name).ok() && name[0] != '.') {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

int ModelRepository::LoadAll() {
  int failed = 0;
  for (const std::string& name : ListModelNames()) {
    if (!Load(name).ok()) ++failed;
  }
  return failed;
}

absl::StatusOr<std::vector<engine::ModelSpec>> ModelRepository::Prepare(
    const std::string& name, inference::ModelConfig& proto) const {
  const fs::path model_dir = fs::path(root_) / name;
  ASSIGN_OR_RETURN(std::string text, ReadFile(model_dir / "config.pbtxt"));
  ASSIGN_OR_RETURN(proto, ParseModelConfigText(text, (model_dir / "config.pbtxt").string()));
  ASSIGN_OR_RETURN(engine::ModelConfig config, ToEngineModelConfig(proto, name));
  proto.set_name(config.name);
  ASSIGN_OR_RETURN(std::vector<int64_t> versions,
                   SelectVersions(proto, ListVersions(model_dir), name));
  std::vector<engine::ModelSpec> specs;
  for (int64_t version : versions) {
    specs.push_back(
        engine::ModelSpec{config, version, (model_dir / std::to_string(version)).string()});
  }
  return specs;
}

absl::Status ModelRepository::Load(const std::string& name) {
  RETURN_IF_ERROR(ValidateModelName(name));
  std::error_code ec;
  if (!fs::is_directory(fs::path(root_) / name, ec)) {
    return absl::NotFoundError(
        absl::StrCat("model '", name, "' has no folder in the repository ", root_));
  }
  common::MutexLock lifecycle(&lifecycle_mu_);
  {
    common::MutexLock lock(&mu_);
    records_[name].loading = true;
  }
  inference::ModelConfig proto;
  absl::StatusOr<std::vector<engine::ModelSpec>> specs = Prepare(name, proto);
  std::vector<int64_t> previous;
  {
    common::MutexLock lock(&mu_);
    Record& record = records_[name];
    previous = record.versions;
    if (!specs.ok()) {
      record = Record{};
      record.error = std::string(specs.status().message());
    }
  }
  if (!specs.ok()) {
    LOG_ERROR(logger_, "model '", name, "' failed to load: ", specs.status().message());
    // A broken config takes the old versions out of service: what is on disk is what serves.
    if (!previous.empty()) engine_->UnloadModel(name).IgnoreError();
    return specs.status();
  }

  absl::Status first_error;
  std::vector<int64_t> versions;
  for (engine::ModelSpec& spec : *specs) {
    versions.push_back(spec.version);
    absl::Status status = engine_->LoadModel(std::move(spec));
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  for (int64_t old : previous) {
    if (std::find(versions.begin(), versions.end(), old) == versions.end()) {
      engine_->UnloadModelVersion(name, old).IgnoreError();
    }
  }
  {
    common::MutexLock lock(&mu_);
    Record& record = records_[name];
    record = Record{};
    record.config = std::move(proto);
    record.versions = std::move(versions);
  }
  return first_error;
}

absl::Status ModelRepository::Unload(const std::string& name) {
  RETURN_IF_ERROR(ValidateModelName(name));
  common::MutexLock lifecycle(&lifecycle_mu_);
  {
    common::MutexLock lock(&mu_);
    auto it = records_.find(name);
    if (it == records_.end() || it->second.unloaded) {
      return absl::NotFoundError(absl::StrCat("model '", name, "' is not loaded"));
    }
  }
  absl::Status status = engine_->UnloadModel(name);
  {
    common::MutexLock lock(&mu_);
    Record& record = records_[name];
    record = Record{};
    record.unloaded = true;
  }
  if (absl::IsNotFound(status)) return absl::OkStatus();  // it had only failed versions
  return status;
}

std::vector<ModelRepository::IndexEntry> ModelRepository::Index(bool ready_only) const {
  std::map<std::string, std::vector<IndexEntry>> by_name;
  for (const std::string& name : ListModelNames()) by_name[name];
  for (const engine::ModelVersionStatus& status : engine_->ListModels()) {
    by_name[status.name].push_back({status.name, std::to_string(status.version),
                                    std::string(engine::ModelStateName(status.state)),
                                    status.reason});
  }
  std::vector<IndexEntry> out;
  common::MutexLock lock(&mu_);
  for (auto& [name, entries] : by_name) {
    auto record = records_.find(name);
    if (entries.empty()) {
      IndexEntry entry{name, "", "UNAVAILABLE", "not loaded"};
      if (record != records_.end()) {
        if (record->second.loading) {
          entry.state = "LOADING";
          entry.reason = "";
        } else if (!record->second.error.empty()) {
          entry.reason = record->second.error;
        } else if (record->second.unloaded) {
          entry.reason = "unloaded";
        }
      }
      entries.push_back(std::move(entry));
    }
    for (IndexEntry& entry : entries) {
      if (ready_only && entry.state != "READY") continue;
      out.push_back(std::move(entry));
    }
  }
  return out;
}

absl::StatusOr<inference::ModelConfig> ModelRepository::GetConfig(const std::string& name) const {
  common::MutexLock lock(&mu_);
  auto it = records_.find(name);
  if (it == records_.end() || !it->second.config.has_value()) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' is not loaded"));
  }
  return *it->second.config;
}

}  // namespace sluice::server
