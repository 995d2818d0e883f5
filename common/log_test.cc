#include "common/log.h"

#include <cstdio>
#include <string>

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

TEST(LoggerTest, ParsesLevelsAndFormats) {
  EXPECT_EQ(*ParseLogLevel("WARNING"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_FALSE(ParseLogLevel("loud").ok());
  EXPECT_FALSE(ParseLogFormat("xml").ok());
}

}  // namespace
}  // namespace sluice::common
