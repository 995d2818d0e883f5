#include "common/byte_size.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace sluice {
namespace {

TEST(ParseByteSizeTest, PlainNumbersAreBytes) {
  EXPECT_EQ(ParseByteSize("0").value(), 0);
  EXPECT_EQ(ParseByteSize("1500").value(), 1500);
  EXPECT_EQ(ParseByteSize("4294967296").value(), int64_t{4294967296});
  EXPECT_EQ(ParseByteSize("9223372036854775807").value(), std::numeric_limits<int64_t>::max());
}

TEST(ParseByteSizeTest, BinaryAndDecimalUnits) {
  EXPECT_EQ(ParseByteSize("512KiB").value(), 512 * 1024);
  EXPECT_EQ(ParseByteSize("64MiB").value(), int64_t{64} << 20);
  EXPECT_EQ(ParseByteSize("4GiB").value(), int64_t{4} << 30);
  EXPECT_EQ(ParseByteSize("4 GiB").value(), int64_t{4} << 30);  // as --help writes it
  EXPECT_EQ(ParseByteSize("2TiB").value(), int64_t{2} << 40);
  EXPECT_EQ(ParseByteSize("64mib").value(), int64_t{64} << 20);
  EXPECT_EQ(ParseByteSize("64M").value(), int64_t{64} << 20);
  EXPECT_EQ(ParseByteSize("10B").value(), 10);
  EXPECT_EQ(ParseByteSize("3kB").value(), 3000);
  EXPECT_EQ(ParseByteSize("2GB").value(), int64_t{2000000000});
  EXPECT_EQ(ParseByteSize("1PB").value(), int64_t{1000000000000000});
  EXPECT_EQ(ParseByteSize(" 8 KiB ").value(), 8192);
}

TEST(ParseByteSizeTest, RejectsWithAMessageThatSaysWhatIsAccepted) {
  for (const char* bad : {"", "MiB", "-1", "+5", "1.5GiB", "4 GiBs", "4XB", "0x10", "4 G iB"}) {
    absl::StatusOr<int64_t> parsed = ParseByteSize(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << bad;
    EXPECT_NE(parsed.status().message().find("64MiB"), std::string::npos) << parsed.status();
  }
  EXPECT_NE(ParseByteSize("4XB").status().message().find("unknown unit 'xb'"), std::string::npos)
      << ParseByteSize("4XB").status();
}

TEST(ParseByteSizeTest, RejectsOverflow) {
  EXPECT_NE(ParseByteSize("9223372036854775808").status().message().find("too large"),
            std::string::npos);
  EXPECT_NE(ParseByteSize("99999999999999999999999").status().message().find("too large"),
            std::string::npos);
  EXPECT_NE(ParseByteSize("8388608TiB").status().message().find("too large"), std::string::npos);
  EXPECT_EQ(ParseByteSize("8388607TiB").value(), int64_t{8388607} << 40);
}

TEST(FormatByteSizeTest, LargestExactUnit) {
  EXPECT_EQ(FormatByteSize(0), "0");
  EXPECT_EQ(FormatByteSize(1000), "1000");
  EXPECT_EQ(FormatByteSize(1024), "1 KiB");
  EXPECT_EQ(FormatByteSize(1536 * 1024), "1536 KiB");
  EXPECT_EQ(FormatByteSize(int64_t{4} << 30), "4 GiB");
  EXPECT_EQ(FormatByteSize(int64_t{16} << 40), "16 TiB");
  EXPECT_EQ(FormatByteSize(int64_t{2147483647}), "2147483647");
}

TEST(FormatByteSizeTest, ReadsBack) {
  for (int64_t bytes :
       {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{1} << 20, (int64_t{3} << 30) + 4096,
        int64_t{1} << 50, std::numeric_limits<int64_t>::max()}) {
    EXPECT_EQ(ParseByteSize(FormatByteSize(bytes)).value(), bytes) << FormatByteSize(bytes);
  }
}

}  // namespace
}  // namespace sluice
