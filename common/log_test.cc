#include "common/log.h"

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::common {
namespace {

std::string ReadAll(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  return out;
}

size_t CountLines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (c == '\n');
  return n;
}

TEST(LoggerTest, WritesTextLinesAtOrAboveLevel) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Logger logger({.min_level = LogLevel::kInfo, .sink = f});
    EXPECT_FALSE(logger.Log(LogLevel::kDebug, "hidden"));
    EXPECT_TRUE(logger.Log(LogLevel::kInfo, "hello", {{"model", "simple"}}));
    LOG_ERROR(&logger, "bad ", 42);
    logger.Flush();
  }
  const std::string text = ReadAll(f);
  EXPECT_EQ(CountLines(text), 2u);
  EXPECT_NE(text.find(" I hello model=simple\n"), std::string::npos) << text;
  EXPECT_NE(text.find(" E bad 42\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("hidden"), std::string::npos);
  std::fclose(f);
}

TEST(LoggerTest, JsonEscapesMessageAndFields) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Logger logger({.format = LogFormat::kJson, .sink = f});
    logger.Log(LogLevel::kWarning, "quote \" and\nnewline", {{"id", "a\\b"}});
  }  // the destructor writes what is queued
  const std::string text = ReadAll(f);
  EXPECT_NE(text.find(R"("level":"warning","msg":"quote \" and\nnewline","id":"a\\b"})"),
            std::string::npos)
      << text;
  std::fclose(f);
}

TEST(LoggerTest, OverflowDropsAndCountsExactly) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  constexpr int kRecords = 20000;
  uint64_t accepted = 0;
  uint64_t dropped = 0;
  {
    Logger logger({.queue_capacity = 4, .sink = f});
    for (int i = 0; i < kRecords; ++i) {
      accepted += logger.Log(LogLevel::kInfo, absl::StrCat("record ", i)) ? 1 : 0;
    }
    logger.Flush();
    dropped = logger.dropped();
  }
  EXPECT_GT(dropped, 0u) << "a 4-record queue should overflow under 20000 records";
  EXPECT_EQ(accepted + dropped, static_cast<uint64_t>(kRecords));
  EXPECT_EQ(CountLines(ReadAll(f)), accepted);
  std::fclose(f);
}

TEST(LoggerTest, TypedFieldsAreFormattedByTheWriter) {
  std::FILE* text_file = std::tmpfile();
  std::FILE* json_file = std::tmpfile();
  ASSERT_NE(text_file, nullptr);
  ASSERT_NE(json_file, nullptr);
  const Logger::Fields fields = {{"s", "text"},      {"i", int64_t{-42}},
                                 {"u", uint64_t{7}}, {"n", 3},
                                 {"d", 0.5},         {"sv", absl::string_view("view")}};
  {
    Logger text({.sink = text_file});
    Logger json({.format = LogFormat::kJson, .sink = json_file});
    text.Log(LogLevel::kInfo, "typed", fields);
    json.Log(LogLevel::kInfo, "typed", fields);
  }
  const std::string text = ReadAll(text_file);
  EXPECT_NE(text.find(" I typed s=text i=-42 u=7 n=3 d=0.5 sv=view\n"), std::string::npos) << text;
  const std::string json = ReadAll(json_file);
  // Numbers are JSON numbers, strings are strings.
  EXPECT_NE(json.find(R"("msg":"typed","s":"text","i":-42,"u":7,"n":3,"d":0.5,"sv":"view"})"),
            std::string::npos)
      << json;
  std::fclose(text_file);
  std::fclose(json_file);
}

TEST(LoggerTest, WrittenPlusDroppedIsEveryRecordOffered) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  constexpr int kRecords = 5000;
  constexpr int kThreads = 4;
  {
    Logger logger({.queue_capacity = 2, .sink = f});
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&logger, t] {
        for (int i = 0; i < kRecords; ++i) {
          logger.Log(LogLevel::kInfo, "r", {{"thread", t}, {"i", i}});
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    logger.Flush();
    EXPECT_EQ(logger.written() + logger.dropped(), static_cast<uint64_t>(kRecords * kThreads));
    EXPECT_EQ(CountLines(ReadAll(f)), logger.written());
  }
  std::fclose(f);
}

TEST(LoggerTest, LogWaitingNeverDrops) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  constexpr int kRecords = 2000;
  {
    Logger logger({.queue_capacity = 1, .sink = f});
    std::thread other([&logger] {
      for (int i = 0; i < kRecords; ++i) logger.LogWaiting(LogLevel::kInfo, "waiting");
    });
    for (int i = 0; i < kRecords; ++i) LOG_INFO_WAITING(&logger, "waiting ", i);
    other.join();
    logger.Flush();
    EXPECT_EQ(logger.dropped(), 0u);
    EXPECT_EQ(logger.written(), 2u * kRecords);
    EXPECT_FALSE(logger.LogWaiting(LogLevel::kDebug, "below the level"));
  }
  EXPECT_EQ(CountLines(ReadAll(f)), 2u * kRecords);
  std::fclose(f);
}

TEST(LoggerTest, ParsesLevelsAndFormats) {
  EXPECT_EQ(*ParseLogLevel("WARNING"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_FALSE(ParseLogLevel("loud").ok());
  EXPECT_FALSE(ParseLogFormat("xml").ok());
}

}  // namespace
}  // namespace sluice::common
