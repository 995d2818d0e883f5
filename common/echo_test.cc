#include "common/echo.h"

#include <string>

#include "gtest/gtest.h"

namespace sluice::common {
namespace {

TEST(EchoInputTest, ShortInputIsKeptWhole) {
  EXPECT_EQ(EchoInput("resnet50"), "resnet50");
  const std::string longest_name(255, 'n');
  EXPECT_EQ(EchoInput(longest_name), longest_name);
}

TEST(EchoInputTest, LongInputIsCutWithAMarkerNamingItsLength) {
  const std::string huge(50 << 20, 'a');
  const std::string echoed = EchoInput(huge);
  EXPECT_EQ(echoed, std::string(kMaxEchoBytes, 'a') + "...[truncated: 52428800 bytes]");
  EXPECT_EQ(EchoInput("abcdef", 3), "abc...[truncated: 6 bytes]");
}

TEST(EchoInputTest, NeverCutsAUtf8Character) {
  // "é" is two bytes (C3 A9); a cut after 3 bytes would split the second one.
  EXPECT_EQ(EchoInput("\xC3\xA9\xC3\xA9\xC3\xA9", 3), "\xC3\xA9...[truncated: 6 bytes]");
}

}  // namespace
}  // namespace sluice::common
