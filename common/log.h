#pragma once

// Logger: log records go into one bounded queue and one writer thread formats and writes them, so
// that no thread that serves requests ever formats a line to a file or waits on I/O. When the queue
// is full a record is dropped and counted, never waited for (ARCHITECTURE §2 rule 6).
//
// Owned by main (injected, not global): components take a `Logger*` and must accept nullptr.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
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

// One field value of a record: text, an integer or a floating-point number. A number is kept as a
// number and formatted by the writer thread (and written as a JSON number in JSON lines), so a
// thread that builds a record (e.g. the completion thread's access log) does no formatting.
class LogValue {
 public:
  LogValue(std::string text) : value_(std::move(text)) {}          // NOLINT: implicit by design
  LogValue(const char* text) : value_(std::string(text)) {}        // NOLINT
  LogValue(absl::string_view text) : value_(std::string(text)) {}  // NOLINT
  template <typename T>
  requires std::is_integral_v<T> LogValue(T number)  // NOLINT
      : value_(ToVariant(number)) {}
  LogValue(double number) : value_(number) {}  // NOLINT

  // Appends the value as text (numbers in decimal, doubles with up to 6 significant digits).
  void AppendText(std::string& out) const;
  // Appends the value as a JSON value: a quoted, escaped string, or a number.
  void AppendJson(std::string& out) const;

 private:
  using Variant = std::variant<std::string, int64_t, uint64_t, double>;
  template <typename T>
  static Variant ToVariant(T number) {
    if constexpr (std::is_signed_v<T>) {
      return static_cast<int64_t>(number);
    } else {
      return static_cast<uint64_t>(number);
    }
  }
  Variant value_;
};

struct LoggerOptions {
  // Records below this level are discarded by Log() before they are queued.
  LogLevel min_level = LogLevel::kInfo;
  // One line of text ("2026-12-01T10:00:00.123456Z I message key=value") or one JSON object.
  LogFormat format = LogFormat::kText;
  // Records waiting for the writer; past this, Log() drops the record and counts it.
  size_t queue_capacity = 8192;
  // Where lines go; not owned (stderr by default). The writer flushes after each batch of lines.
  std::FILE* sink = stderr;
  // Once a record wakes the idle writer, how long it lets more accumulate before it writes them
  // all at once: under a stream of records (an access log at a high sample rate) the writer wakes
  // and writes once per delay instead of once or twice per record, and producers then never wake
  // it. Lines appear at most this much later. Not applied while the queue is half full or more.
  std::chrono::microseconds batch_delay{1000};
};

// Thread-safe. Log() never blocks on I/O: it takes a mutex for the time of a deque push.
class Logger {
 public:
  using Fields = std::vector<std::pair<std::string, LogValue>>;

  explicit Logger(LoggerOptions options = {});
  // Writes every queued record, then joins the writer thread.
  ~Logger();
  Logger(const Logger&) = delete;
  Logger& operator=(const Logger&) = delete;

  bool Enabled(LogLevel level) const { return level >= options_.min_level; }

  // Queues one record. Returns false if it was dropped (queue full or level disabled).
  bool Log(LogLevel level, std::string message, Fields fields = {});

  // As Log(), but when the queue is full waits for the writer to make room instead of dropping.
  // For the few lines that must not be lost and come from a thread that serves no request (the
  // server's start-up and shutdown lines: bound ports, "server ready"); never call it on a
  // request path. Returns false only if the level is disabled.
  bool LogWaiting(LogLevel level, std::string message, Fields fields = {});

  // Blocks until every record queued before the call has been written. For shutdown and tests.
  void Flush();

  // Records dropped because the queue was full, since start.
  uint64_t dropped() const;
  // Records written to the sink, since start. Every record Log() accepted is eventually written
  // (at the latest by the destructor), so after Flush(): written() + dropped() = records offered
  // at an enabled level.
  uint64_t written() const;

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
  std::condition_variable room_cv_;     // LogWaiting() waits for room in the queue
  std::deque<Record> queue_;            // guarded by mu_
  uint64_t queued_total_ = 0;           // guarded by mu_
  uint64_t written_total_ = 0;          // guarded by mu_
  uint64_t dropped_ = 0;                // guarded by mu_
  bool stop_ = false;                   // guarded by mu_
  // The writer waits for a first record (producers then wake it); guarded by mu_.
  bool writer_idle_ = false;
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
// A line that waits for room rather than being dropped (Logger::LogWaiting): off request paths.
#define LOG_INFO_WAITING(logger, ...)                                                              \
  do {                                                                                             \
    ::sluice::common::Logger* sluice_logger_ = (logger);                                           \
    if (sluice_logger_ != nullptr && sluice_logger_->Enabled(::sluice::common::LogLevel::kInfo)) { \
      sluice_logger_->LogWaiting(::sluice::common::LogLevel::kInfo, ::absl::StrCat(__VA_ARGS__));  \
    }                                                                                              \
  } while (false)

}  // namespace sluice::common
