#pragma once

// Logger: log records go into one bounded queue and one writer thread formats and writes them, so
// that no thread that serves requests ever formats a line to a file or waits on I/O. When the queue
// is full a record is dropped and counted, never waited for (ARCHITECTURE §2 rule 6).
//
// Owned by main (injected, not global): components take a `Logger*` and must accept nullptr.

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sluice::common {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
enum class LogFormat { kText, kJson };

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name);
absl::string_view LogLevelName(LogLevel level);

struct LoggerOptions {
  // Records below this level are discarded by Log() before they are queued.
  LogLevel min_level = LogLevel::kInfo;
  // One line of text ("2026-12-01T10:00:00.123456Z I message key=value") or one JSON object.
  LogFormat format = LogFormat::kText;
  // Records waiting for the writer; past this, Log() drops the record and counts it.
  size_t queue_capacity = 8192;
  // Where lines go; not owned (stderr by default). The writer flushes after each batch of lines.
  std::FILE* sink = stderr;
};

// Thread-safe. Log() never blocks on I/O: it takes a mutex for the time of a deque push.
class Logger {
 public:
  using Fields = std::vector<std::pair<std::string, std::string>>;

  explicit Logger(LoggerOptions options = {});
  // Writes every queued record, then joins the writer thread.
  ~Logger();
  Logger(const Logger&) = delete;
  Logger& operator=(const Logger&) = delete;

  bool Enabled(LogLevel level) const { return level >= options_.min_level; }

  // Queues one record. Returns false if it was dropped (queue full or level disabled).
  bool Log(LogLevel level, std::string message, Fields fields = {});

  // Blocks until every record queued before the call has been written. For shutdown and tests.
  void Flush();

  // Records dropped because the queue was full, since start.
  uint64_t dropped() const;

 private:
  struct Record {
    absl::Time time;
    LogLevel level;
    std::string message;
    Fields fields;
  };

  void WriterLoop();
  std::string Format(const Record& record) const;

  const LoggerOptions options_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;     // writer waits for records or stop
  std::condition_variable flushed_cv_;  // Flush() waits for written_ to catch up
  std::deque<Record> queue_;            // guarded by mu_
  uint64_t queued_total_ = 0;           // guarded by mu_
  uint64_t written_total_ = 0;          // guarded by mu_
  uint64_t dropped_ = 0;                // guarded by mu_
  bool stop_ = false;                   // guarded by mu_
  std::thread writer_;
};

// Convenience: log through a nullable logger; the message is only built if the level is enabled.
#define SLUICE_LOG(logger, level, ...)                                 \
  do {                                                                 \
    ::sluice::common::Logger* sluice_logger_ = (logger);               \
    if (sluice_logger_ != nullptr && sluice_logger_->Enabled(level)) { \
      sluice_logger_->Log(level, ::absl::StrCat(__VA_ARGS__));         \
    }                                                                  \
  } while (false)
#define LOG_DEBUG(logger, ...) SLUICE_LOG(logger, ::sluice::common::LogLevel::kDebug, __VA_ARGS__)
#define LOG_INFO(logger, ...) SLUICE_LOG(logger, ::sluice::common::LogLevel::kInfo, __VA_ARGS__)
#define LOG_WARNING(logger, ...) \
  SLUICE_LOG(logger, ::sluice::common::LogLevel::kWarning, __VA_ARGS__)
#define LOG_ERROR(logger, ...) SLUICE_LOG(logger, ::sluice::common::LogLevel::kError, __VA_ARGS__)

}  // namespace sluice::common
