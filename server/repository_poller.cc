#include "server/repository_poller.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "server/model_control.h"
#include "server/model_repository.h"

namespace sluice::server {
namespace fs = std::filesystem;

RepositoryPoller::RepositoryPoller(ModelRepository* repository, ModelControl* control,
                                   common::Logger* logger, RepositoryPollerOptions options)
    : repository_(repository), control_(control), logger_(logger), options_(options) {}

RepositoryPoller::~RepositoryPoller() { Stop(); }

void RepositoryPoller::Baseline() {
  for (const std::string& name : repository_->ListModelNames()) {
    const std::string fingerprint = Fingerprint(name);
    if (fingerprint.empty()) continue;
    seen_[name] = Seen{fingerprint, fingerprint};
  }
}

void RepositoryPoller::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void RepositoryPoller::Stop() {
  {
    common::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

void RepositoryPoller::Loop() {
  for (;;) {
    {
      common::MutexLock lock(&mu_);
      const auto deadline = std::chrono::steady_clock::now() + options_.interval;
      while (!stop_ && std::chrono::steady_clock::now() < deadline) cv_.WaitUntil(&mu_, deadline);
      if (stop_) return;
    }
    Scan();
  }
}

std::string RepositoryPoller::Fingerprint(const std::string& name) {
  const fs::path model_dir = fs::path(repository_->root()) / name;
  // (relative path, size, mtime ns) of config.pbtxt and of the files and folders in the version
  // folders, two levels deep: what Prepare() and the backends read. stat() follows symlinks, so
  // a link retargeted to new weights is a change too.
  std::vector<std::string> parts;
  bool truncated = false;
  auto add = [&](const fs::path& path) {
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) return;
    const int64_t mtime_ns = int64_t{info.st_mtim.tv_sec} * 1000000000 + info.st_mtim.tv_nsec;
    parts.push_back(absl::StrCat(path.lexically_relative(model_dir).string(), "|",
                                 S_ISDIR(info.st_mode) ? "d" : "f", info.st_size, "|", mtime_ns));
  };
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) return "";
  add(model_dir / "config.pbtxt");
  std::vector<fs::path> folders;
  for (const auto& entry : fs::directory_iterator(model_dir, ec)) {
    if (entry.path().filename() == "config.pbtxt") continue;
    if (static_cast<int>(parts.size() + folders.size()) >= options_.max_entries_per_model) {
      truncated = true;
      break;
    }
    if (entry.is_directory(ec)) {
      folders.push_back(entry.path());
    } else {
      add(entry.path());
    }
  }
  // Version folders and one level below them (a backend's files in a sub-folder).
  for (size_t i = 0; i < folders.size() && !truncated; ++i) {
    add(folders[i]);
    const fs::path relative = folders[i].lexically_relative(model_dir);
    const auto depth = std::distance(relative.begin(), relative.end());
    for (const auto& entry : fs::directory_iterator(folders[i], ec)) {
      if (static_cast<int>(parts.size() + folders.size()) >= options_.max_entries_per_model) {
        truncated = true;
        break;
      }
      if (depth < 2 && entry.is_directory(ec)) {
        folders.push_back(entry.path());
      } else {
        add(entry.path());
      }
    }
  }
  if (truncated) {
    LOG_WARNING(logger_, "model '", name, "': more than ", options_.max_entries_per_model,
                " files and folders; the repository poll watches only the first ones for changes");
  }
  std::sort(parts.begin(), parts.end());
  std::string fingerprint = "present";  // never empty for an existing folder
  for (const std::string& part : parts) absl::StrAppend(&fingerprint, "\n", part);
  return fingerprint;
}

void RepositoryPoller::Scan() {
  std::set<std::string> present;
  for (const std::string& name : repository_->ListModelNames()) {
    std::string fingerprint = Fingerprint(name);
    if (fingerprint.empty()) continue;  // removed since it was listed
    present.insert(name);
    Seen& seen = seen_[name];
    if (fingerprint != seen.last_scan) {
      // New or changed since the last scan: maybe still being copied. Load it once a scan finds
      // it unchanged.
      if (seen.last_scan == seen.submitted) {
        LOG_INFO(logger_, "model '", name, seen.submitted.empty() ? "' appeared" : "' changed",
                 " in the repository; it loads once a poll finds its files unchanged");
      }
      seen.last_scan = std::move(fingerprint);
      continue;
    }
    if (fingerprint == seen.submitted) continue;
    const bool reload = !seen.submitted.empty();
    absl::Status queued = control_->Submit(
        {.work = [repository = repository_, name] { return repository->Load(name); },
         .answer =
             [logger = logger_, name, reload](const absl::Status& status) {
               // A failed load was logged with its reason by the repository.
               if (status.ok()) {
                 LOG_INFO(logger, "model '", name, reload ? "' reloaded" : "' loaded",
                          " (repository poll)");
               }
             },
         .abandoned = nullptr,
         .what = absl::StrCat("load of model '", name, "' (repository poll)")});
    if (!queued.ok()) {
      LOG_WARNING(logger_, queued.message(), "; the next poll tries again");
      continue;
    }
    seen.submitted = seen.last_scan;
  }
  for (auto it = seen_.begin(); it != seen_.end();) {
    if (present.count(it->first) > 0) {
      ++it;
      continue;
    }
    if (it->second.submitted.empty()) {  // appeared and went before it was loaded
      it = seen_.erase(it);
      continue;
    }
    const std::string name = it->first;
    absl::Status queued = control_->Submit(
        {.work = [repository = repository_, name] { return repository->Unload(name); },
         .answer =
             [logger = logger_, name](const absl::Status& status) {
               if (status.ok() || absl::IsNotFound(status)) {
                 LOG_INFO(logger, "model '", name,
                          "' unloaded: its folder left the repository (repository poll)");
               } else {
                 LOG_WARNING(logger, "model '", name, "': unload failed: ", status.message());
               }
             },
         .abandoned = nullptr,
         .what = absl::StrCat("unload of model '", name, "' (repository poll)")});
    if (!queued.ok()) {
      LOG_WARNING(logger_, queued.message(), "; the next poll tries again");
      ++it;
      continue;
    }
    it = seen_.erase(it);
  }
}

}  // namespace sluice::server
