#include "common/log.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "common/json_string.h"

namespace sluice::common {

void LogValue::AppendText(std::string& out) const {
  if (const auto* text = std::get_if<std::string>(&value_)) {
    out += *text;
  } else if (const auto* i = std::get_if<int64_t>(&value_)) {
    absl::StrAppend(&out, *i);
  } else if (const auto* u = std::get_if<uint64_t>(&value_)) {
    absl::StrAppend(&out, *u);
  } else {
    absl::StrAppend(&out, std::get<double>(value_));
  }
}

void LogValue::AppendJson(std::string& out) const {
  if (const auto* text = std::get_if<std::string>(&value_)) {
    AppendJsonString(out, *text);
    return;
  }
  if (const auto* d = std::get_if<double>(&value_); d != nullptr && !std::isfinite(*d)) {
    AppendJsonString(out, absl::StrCat(*d));  // JSON has no NaN or infinity
    return;
  }
  AppendText(out);
}

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  std::string lower = absl::AsciiStrToLower(name);
  if (lower == "debug") return LogLevel::kDebug;
  if (lower == "info") return LogLevel::kInfo;
  if (lower == "warning" || lower == "warn") return LogLevel::kWarning;
  if (lower == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log level '", name, "' (expected debug, info, warning or error)"));
}

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name) {
  std::string lower = absl::AsciiStrToLower(name);
  if (lower == "text") return LogFormat::kText;
  if (lower == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log format '", name, "' (expected text or json)"));
}

absl::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "unknown";
}

Logger::Logger(LoggerOptions options) : options_(options) {
  writer_ = std::thread([this] { WriterLoop(); });
}

Logger::~Logger() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_one();
  writer_.join();
}

bool Logger::Log(LogLevel level, std::string message, Fields fields) {
  if (!Enabled(level)) return false;
  Record record{absl::Now(), level, std::move(message), std::move(fields)};
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= options_.queue_capacity) {
      ++dropped_;
      return false;
    }
    queue_.push_back(std::move(record));
    ++queued_total_;
    wake = writer_idle_;
  }
  // Only an idle writer needs waking; while it gathers a batch (batch_delay) nobody signals it.
  if (wake) work_cv_.notify_one();
  return true;
}

bool Logger::LogWaiting(LogLevel level, std::string message, Fields fields) {
  if (!Enabled(level)) return false;
  Record record{absl::Now(), level, std::move(message), std::move(fields)};
  {
    std::unique_lock<std::mutex> lock(mu_);
    room_cv_.wait(lock, [&] { return queue_.size() < options_.queue_capacity; });
    queue_.push_back(std::move(record));
    ++queued_total_;
  }
  work_cv_.notify_one();
  return true;
}

void Logger::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = queued_total_;
  work_cv_.notify_one();
  flushed_cv_.wait(lock, [&] { return written_total_ >= target; });
}

uint64_t Logger::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

uint64_t Logger::written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return written_total_;
}

void Logger::WriterLoop() {
  std::deque<Record> batch;
  std::string text;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      writer_idle_ = true;
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      writer_idle_ = false;
      if (queue_.empty() && stop_) return;
      // Let a burst accumulate so that it costs one wake-up and one write, not one per record.
      if (!stop_ && options_.batch_delay.count() > 0 &&
          queue_.size() < options_.queue_capacity / 2) {
        lock.unlock();
        std::this_thread::sleep_for(options_.batch_delay);
        lock.lock();
      }
      batch.swap(queue_);
    }
    room_cv_.notify_all();
    // Formatting and I/O happen here, outside the lock and off every request thread.
    text.clear();
    for (const Record& record : batch) {
      text += Format(record);
      text.push_back('\n');
    }
    std::fwrite(text.data(), 1, text.size(), options_.sink);
    std::fflush(options_.sink);
    {
      std::lock_guard<std::mutex> lock(mu_);
      written_total_ += batch.size();
    }
    flushed_cv_.notify_all();
    batch.clear();
  }
}

std::string Logger::Format(const Record& record) const {
  const std::string time =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", record.time, absl::UTCTimeZone());
  std::string out;
  if (options_.format == LogFormat::kJson) {
    out = absl::StrCat("{\"time\":\"", time, "\",\"level\":\"", LogLevelName(record.level),
                       "\",\"msg\":");
    AppendJsonString(out, record.message);
    for (const auto& [key, value] : record.fields) {
      out.push_back(',');
      AppendJsonString(out, key);
      out.push_back(':');
      value.AppendJson(out);
    }
    out.push_back('}');
    return out;
  }
  static constexpr char kLevelLetter[] = {'D', 'I', 'W', 'E'};
  out = absl::StrCat(time, " ", std::string(1, kLevelLetter[static_cast<int>(record.level)]), " ",
                     record.message);
  for (const auto& [key, value] : record.fields) {
    absl::StrAppend(&out, " ", key, "=");
    value.AppendText(out);
  }
  return out;
}

}  // namespace sluice::common
