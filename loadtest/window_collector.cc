#include "loadtest/window_collector.h"

#include <utility>

#include "absl/status/status.h"

namespace sluice::loadtest {

void WindowRecord::Merge(const WindowRecord& other) {
  latency.Merge(other.latency);
  failed_latency.Merge(other.failed_latency);
  succeeded += other.succeeded;
  failed += other.failed;
  succeeded_tokens += other.succeeded_tokens;
  sent += other.sent;
  sent_late += other.sent_late;
  skipped += other.skipped;
  for (const auto& [code, count] : other.errors_by_code) errors_by_code[code] += count;
  for (const auto& [code, message] : other.first_error_by_code) {
    first_error_by_code.emplace(code, message);  // keeps ours if we have one
  }
}

void WindowCollector::RecordSent() {
  common::MutexLock lock(&mu_);
  ++current_.sent;
}

void WindowCollector::RecordSentLate() {
  common::MutexLock lock(&mu_);
  ++current_.sent_late;
}

void WindowCollector::RecordSkipped() {
  common::MutexLock lock(&mu_);
  ++current_.skipped;
}

void WindowCollector::RecordResult(const absl::Status& status, int64_t latency_ns, int64_t tokens) {
  if (status.ok()) {
    common::MutexLock lock(&mu_);
    ++current_.succeeded;
    current_.succeeded_tokens += tokens;
    current_.latency.Record(latency_ns);
    return;
  }
  common::MutexLock lock(&mu_);
  ++current_.failed;
  current_.failed_latency.Record(latency_ns);
  ++current_.errors_by_code[status.code()];
  if (!current_.first_error_by_code.contains(status.code())) {
    current_.first_error_by_code.emplace(status.code(), std::string(status.message()));
  }
}

WindowRecord WindowCollector::TakeWindow() {
  // The fresh record's histogram is allocated outside the lock, so recorders never wait on it.
  WindowRecord fresh;
  common::MutexLock lock(&mu_);
  std::swap(fresh, current_);
  return fresh;
}

WindowCollector::Peek WindowCollector::PeekCurrent() const {
  common::MutexLock lock(&mu_);
  return Peek{current_.succeeded, current_.failed};
}

}  // namespace sluice::loadtest
