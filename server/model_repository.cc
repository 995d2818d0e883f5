#include "server/model_repository.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <set>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/echo.h"
#include "common/status_macros.h"
#include "server/model_config_parser.h"

namespace sluice::server {
namespace fs = std::filesystem;

namespace {

// Reads a config file without trusting what the path names: a FIFO (or a device) must not
// block the control thread or be read up to gigabytes (/dev/zero as config.pbtxt was read up to
// 2 GB). O_NONBLOCK makes open() of a FIFO return at once, fstat() refuses anything but a
// regular file, and at most `max_bytes` + 1 bytes are read even if the file grows meanwhile.
// (A hung network mount can still block open() or read() in the kernel; the exit timeout holds
// regardless: see server/main/server_main.cc.)
absl::StatusOr<std::string> ReadConfigFile(const fs::path& path, int64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", path.string(), ": ", std::strerror(errno)));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot stat ", path.string(), ": ", std::strerror(errno)));
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(), " is not a regular file (a FIFO, device or directory)"));
  }
  if (info.st_size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), " has ", info.st_size,
                                                   " bytes, over the limit of ", max_bytes,
                                                   " (--max-config-bytes)"));
  }
  std::string text(static_cast<size_t>(info.st_size) + 1, '\0');
  size_t used = 0;
  while (used < text.size()) {
    const ssize_t got = ::read(fd, text.data() + used, text.size() - used);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return absl::InternalError(
          absl::StrCat("cannot read ", path.string(), ": ", std::strerror(errno)));
    }
    if (got == 0) break;
    used += static_cast<size_t>(got);
    if (used > static_cast<size_t>(max_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(path.string(), " grew past the limit of ",
                                                     max_bytes, " bytes (--max-config-bytes)"));
    }
  }
  text.resize(used);
  return text;
}

// Numeric version folders of a model, ascending. A folder whose name reads as a number but is
// not its canonical decimal form (" 1", "01", "+1") is refused: "1" and "01" would both be
// version 1, and " 1" was loaded from "1/".
absl::StatusOr<std::vector<int64_t>> ListVersions(const fs::path& model_dir,
                                                  const std::string& name) {
  std::vector<int64_t> versions;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(model_dir, ec)) {
    if (!entry.is_directory(ec)) continue;
    const std::string folder = entry.path().filename().string();
    int64_t version = 0;
    const bool all_digits =
        !folder.empty() &&
        std::all_of(folder.begin(), folder.end(), [](char c) { return c >= '0' && c <= '9'; });
    const bool parses = absl::SimpleAtoi(folder, &version);
    if (!parses && !all_digits) continue;  // not a version folder (assets, ...)
    if (!parses || absl::StrCat(version) != folder) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", name, "': version folder '", common::EchoInput(folder),
          "' is ambiguous: a version folder is named by a canonical positive decimal number "
          "(1, 2, ...; not 01, +1, ' 1' or beyond 64 bits)"));
    }
    if (version > 0) versions.push_back(version);
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
  if (name.size() > kMaxModelNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("invalid model name '", common::EchoInput(name),
                                                   "': longer than ", kMaxModelNameBytes,
                                                   " bytes"));
  }
  if (name.empty() || name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat("invalid model name '", name, "'"));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid model name '", common::EchoInput(name),
                       "': only letters, digits, '_', '-' and '.' are allowed"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ModelRepository>> ModelRepository::Create(
    const std::string& root, engine::Engine* engine, common::Logger* logger,
    RepositoryOptions options) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::NotFoundError(absl::StrCat("model repository '", root, "' is not a directory"));
  }
  return std::unique_ptr<ModelRepository>(
      new ModelRepository(fs::canonical(root, ec).string(), engine, logger, std::move(options)));
}

ModelRepository::ModelRepository(std::string root, engine::Engine* engine, common::Logger* logger,
                                 RepositoryOptions options)
    : root_(std::move(root)), options_(std::move(options)), engine_(engine), logger_(logger) {}

absl::Status ModelRepository::CheckInside(const std::string& name, const fs::path& path,
                                          absl::string_view what) const {
  if (options_.allow_symlinks_out_of_repository) return absl::OkStatus();
  // The resolved path must lie under the (canonical) root: a symlink anywhere on the way that
  // leaves the repository is refused, one that stays inside is fine. (A symlink swapped after
  // this check is followed: whoever can write the repository can also write its models.)
  std::error_code ec;
  const fs::path resolved = fs::canonical(path, ec);
  // Nothing there (or a dangling link): nothing is followed, and the open that comes next says
  // what is missing.
  if (ec) return absl::OkStatus();
  const std::string text = resolved.string();
  if (text.size() <= root_.size() || text.compare(0, root_.size(), root_) != 0 ||
      text[root_.size()] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", name, "': ", what, " ", path.string(), " is a symlink to ",
                     common::EchoInput(text), ", outside the repository ", root_,
                     " (allow with --allow-symlinks-out-of-repository)"));
  }
  return absl::OkStatus();
}

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

std::vector<std::string> ModelRepository::LoadAll() {
  std::vector<std::string> failed;
  for (const std::string& name : ListModelNames()) {
    if (!Load(name).ok()) failed.push_back(name);
  }
  return failed;
}

std::vector<std::string> ModelRepository::LoadListed(const std::vector<std::string>& names) {
  std::vector<std::string> failed;
  for (const std::string& name : names) {
    const absl::Status status = LoadOne(name, /*record_missing=*/true);
    NotifyModelsChanged();
    if (!status.ok()) failed.push_back(name);
  }
  return failed;
}

void ModelRepository::NotifyModelsChanged() const {
  if (options_.on_models_changed) options_.on_models_changed();
}

absl::StatusOr<std::vector<engine::ModelSpec>> ModelRepository::Prepare(
    const std::string& name, inference::ModelConfig& proto) const {
  const fs::path model_dir = fs::path(root_) / name;
  const fs::path config_path = model_dir / "config.pbtxt";
  RETURN_IF_ERROR(CheckInside(name, model_dir, "folder"));
  RETURN_IF_ERROR(CheckInside(name, config_path, "config"));
  ASSIGN_OR_RETURN(std::string text, ReadConfigFile(config_path, options_.max_config_bytes));
  ASSIGN_OR_RETURN(proto, ParseModelConfigText(text, config_path.string()));
  ASSIGN_OR_RETURN(engine::ModelConfig config,
                   ToEngineModelConfig(proto, name, options_.load_limits));
  proto.set_name(config.name);
  ASSIGN_OR_RETURN(std::vector<int64_t> available, ListVersions(model_dir, name));
  ASSIGN_OR_RETURN(std::vector<int64_t> versions, SelectVersions(proto, available, name));
  std::vector<engine::ModelSpec> specs;
  for (int64_t version : versions) {
    const fs::path version_dir = model_dir / std::to_string(version);
    RETURN_IF_ERROR(CheckInside(name, version_dir, "version folder"));
    // The files a backend opens (weights) are named by the config and live directly in the
    // version folder (mlp's weights_file refuses '/' and '..'); a symlink there is checked too.
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(version_dir, ec)) {
      if (entry.is_symlink(ec)) RETURN_IF_ERROR(CheckInside(name, entry.path(), "file"));
    }
    engine::ModelSpec spec{config, version, version_dir.string()};
    spec.limits = options_.load_limits;
    specs.push_back(std::move(spec));
  }
  return specs;
}

absl::Status ModelRepository::Load(const std::string& name) {
  const absl::Status status = LoadOne(name, /*record_missing=*/false);
  NotifyModelsChanged();
  return status;
}

absl::Status ModelRepository::LoadOne(const std::string& name, bool record_missing) {
  if (absl::Status valid = ValidateModelName(name); !valid.ok()) {
    LOG_ERROR(logger_, "cannot load: ", valid.message());
    return valid;
  }
  std::error_code ec;
  if (!fs::is_directory(fs::path(root_) / name, ec)) {
    absl::Status missing = absl::NotFoundError(
        absl::StrCat("model '", name, "' has no folder in the repository ", root_));
    LOG_ERROR(logger_, "model '", name, "' failed to load: ", missing.message());
    if (record_missing) {
      common::MutexLock lifecycle(&lifecycle_mu_);
      bool had_versions = false;
      {
        common::MutexLock lock(&mu_);
        Record& record = records_[name];
        had_versions = !record.versions.empty();
        record = Record{};
        record.error = std::string(missing.message());
      }
      if (had_versions) engine_->UnloadModel(name).IgnoreError();
      engine_->RecordModelFailure(name, std::string(missing.message()));
    }
    return missing;
  }
  common::MutexLock lifecycle(&lifecycle_mu_);
  {
    common::MutexLock lock(&mu_);
    records_[name].loading = true;
  }
  inference::ModelConfig proto;
  absl::StatusOr<std::vector<engine::ModelSpec>> specs = absl::UnknownError("not prepared");
  // Our code throws nothing, but parsing allocates: an allocation failure is this model's load
  // error, never the end of the process (the engine catches the same around its build).
  try {
    specs = Prepare(name, proto);
  } catch (const std::exception& e) {
    specs = absl::ResourceExhaustedError(
        absl::StrCat("model '", name, "' failed to load: ", common::EchoInput(e.what())));
  }
  std::vector<int64_t> previous;
  std::string error;
  {
    common::MutexLock lock(&mu_);
    Record& record = records_[name];
    previous = record.versions;
    if (!specs.ok()) {
      record = Record{};
      record.error = common::EchoInput(specs.status().message(), common::kMaxMessageBytes);
      error = record.error;
    }
  }
  if (!specs.ok()) {
    LOG_ERROR(logger_, "model '", name, "' failed to load: ", error);
    // A broken config takes the old versions out of service: what is on disk is what serves.
    if (!previous.empty()) engine_->UnloadModel(name).IgnoreError();
    // Requests for it answer UNAVAILABLE with the reason, not "unknown model".
    engine_->RecordModelFailure(name, std::move(error));
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
  absl::Status status;
  {
    common::MutexLock lifecycle(&lifecycle_mu_);
    {
      common::MutexLock lock(&mu_);
      auto it = records_.find(name);
      if (it == records_.end() || it->second.unloaded) {
        return absl::NotFoundError(absl::StrCat("model '", name, "' is not loaded"));
      }
      it->second.unloading = true;
    }
    status = engine_->UnloadModel(name);
    {
      common::MutexLock lock(&mu_);
      Record& record = records_[name];
      record = Record{};
      record.unloaded = true;
    }
  }
  NotifyModelsChanged();
  if (absl::IsNotFound(status)) return absl::OkStatus();  // it had only failed versions
  return status;
}

std::vector<ModelRepository::IndexEntry> ModelRepository::Index(bool ready_only) const {
  std::map<std::string, std::vector<IndexEntry>> by_name;
  for (const std::string& name : ListModelNames()) by_name[name];
  for (const engine::ModelVersionStatus& status : engine_->ListModels()) {
    // A whole-model failure (its config) concerns no version: Triton's index leaves it empty.
    std::string version = status.version == engine::ModelVersionTable::kWholeModel
                              ? std::string()
                              : std::to_string(status.version);
    // Bounded: a reason echoes config input, and RepositoryIndex repeats it on every call.
    by_name[status.name].push_back({status.name, std::move(version),
                                    std::string(engine::ModelStateName(status.state)),
                                    common::EchoInput(status.reason, common::kMaxMessageBytes)});
  }
  std::vector<IndexEntry> out;
  common::MutexLock lock(&mu_);
  for (auto& [name, entries] : by_name) {
    auto record = records_.find(name);
    if (record != records_.end() && record->second.unloading) {
      for (IndexEntry& entry : entries) {
        entry.state = "UNLOADING";
        entry.reason = "";
      }
    }
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

std::vector<ModelRepository::IndexEntry> ModelRepository::RequestedModelStates() const {
  std::vector<IndexEntry> index = Index(/*ready_only=*/false);
  common::MutexLock lock(&mu_);
  std::vector<IndexEntry> out;
  for (IndexEntry& entry : index) {
    auto record = records_.find(entry.name);
    if (record != records_.end() && !record->second.unloaded) out.push_back(std::move(entry));
  }
  return out;
}

bool ModelRepository::AllModelsReady() const {
  std::vector<std::pair<std::string, std::vector<int64_t>>> requested;
  {
    common::MutexLock lock(&mu_);
    for (const auto& [name, record] : records_) {
      if (record.unloaded) continue;
      // A failed config, or a first load still running (a reload keeps its previous versions).
      if (!record.error.empty() || record.versions.empty()) return false;
      requested.emplace_back(name, record.versions);
    }
  }
  // Outside mu_: the engine takes its own lock.
  for (const auto& [name, versions] : requested) {
    for (int64_t version : versions) {
      if (!engine_->IsModelReady(name, version)) return false;
    }
  }
  return true;
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
