#include "server/http/content_coding.h"

#include <zlib.h>

#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::server::http {
namespace {

using ::testing::HasSubstr;

// Python's gzip.compress(b'{"inputs": []}', mtime=0) and zlib.compress(...) of the same bytes:
// what another implementation writes, not what Deflate below writes.
const std::string kPlain = R"({"inputs": []})";
const std::string kGzip(
    "\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\xab\x56\xca\xcc\x2b\x28\x2d\x29\x56\xb2\x52\x88"
    "\x8e\xad\x05\x00\x45\xf6\xff\xe9\x0e\x00\x00\x00",
    34);
const std::string kZlib(
    "\x78\x9c\xab\x56\xca\xcc\x2b\x28\x2d\x29\x56\xb2\x52\x88\x8e\xad\x05\x00\x26\x20\x04\xf2", 22);

bool Unlimited(uint64_t) { return true; }

absl::StatusOr<std::string> InflateAll(const std::string& coded, ContentCoding coding,
                                       uint64_t max_bytes = 1 << 20) {
  uint64_t reserved = 0;
  return Inflate(coded, coding, max_bytes, "--limit", Unlimited, &reserved);
}

TEST(ContentCodingTest, ContentEncodingNamesOneCodingWeKnow) {
  EXPECT_EQ(ParseContentEncoding("").value(), ContentCoding::kIdentity);
  EXPECT_EQ(ParseContentEncoding(" identity ").value(), ContentCoding::kIdentity);
  EXPECT_EQ(ParseContentEncoding("GZIP").value(), ContentCoding::kGzip);
  EXPECT_EQ(ParseContentEncoding("x-gzip").value(), ContentCoding::kGzip);
  EXPECT_EQ(ParseContentEncoding("deflate").value(), ContentCoding::kDeflate);
  for (const char* refused : {"br", "zstd", "gzip, br", "compress"}) {
    absl::StatusOr<ContentCoding> coding = ParseContentEncoding(refused);
    ASSERT_FALSE(coding.ok()) << refused;
    EXPECT_EQ(coding.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(coding.status().message(), HasSubstr("gzip or deflate"));
  }
}

TEST(ContentCodingTest, AcceptEncodingPicksGzipThenDeflateAndHonoursQZero) {
  EXPECT_EQ(ChooseResponseCoding(""), ContentCoding::kIdentity);
  EXPECT_EQ(ChooseResponseCoding("identity"), ContentCoding::kIdentity);
  EXPECT_EQ(ChooseResponseCoding("gzip"), ContentCoding::kGzip);
  EXPECT_EQ(ChooseResponseCoding("deflate"), ContentCoding::kDeflate);
  EXPECT_EQ(ChooseResponseCoding("deflate, gzip"), ContentCoding::kGzip);
  EXPECT_EQ(ChooseResponseCoding("gzip;q=0, deflate"), ContentCoding::kDeflate);
  EXPECT_EQ(ChooseResponseCoding("gzip; q=0.0, deflate;q=0"), ContentCoding::kIdentity);
  EXPECT_EQ(ChooseResponseCoding("*"), ContentCoding::kGzip);
  EXPECT_EQ(ChooseResponseCoding("*;q=0"), ContentCoding::kIdentity);
  EXPECT_EQ(ChooseResponseCoding("br, *;q=0.5"), ContentCoding::kGzip);
  EXPECT_EQ(ChooseResponseCoding("br"), ContentCoding::kIdentity);
  EXPECT_EQ(ChooseResponseCoding("gzip;q=nonsense"), ContentCoding::kIdentity);
}

TEST(ContentCodingTest, InflatesWhatOtherImplementationsWrite) {
  EXPECT_EQ(InflateAll(kGzip, ContentCoding::kGzip).value(), kPlain);
  EXPECT_EQ(InflateAll(kZlib, ContentCoding::kDeflate).value(), kPlain);
}

TEST(ContentCodingTest, DeflateWritesWhatZlibReads) {
  std::string plain;
  for (int i = 0; i < 5000; ++i) plain += std::to_string(i * 0.25) + ",";
  absl::StatusOr<std::string> deflated = Deflate(plain, ContentCoding::kDeflate);
  ASSERT_TRUE(deflated.ok()) << deflated.status();
  EXPECT_LT(deflated->size(), plain.size() / 2);
  std::string back(plain.size(), '\0');
  uLongf back_size = back.size();
  ASSERT_EQ(uncompress(reinterpret_cast<Bytef*>(back.data()), &back_size,
                       reinterpret_cast<const Bytef*>(deflated->data()), deflated->size()),
            Z_OK);
  back.resize(back_size);
  EXPECT_EQ(back, plain);

  absl::StatusOr<std::string> gzipped = Deflate(plain, ContentCoding::kGzip);
  ASSERT_TRUE(gzipped.ok()) << gzipped.status();
  ASSERT_GE(gzipped->size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>((*gzipped)[0]), 0x1f);  // the gzip magic
  EXPECT_EQ(static_cast<unsigned char>((*gzipped)[1]), 0x8b);
  EXPECT_EQ(InflateAll(*gzipped, ContentCoding::kGzip).value(), plain);
}

TEST(ContentCodingTest, BadDataIsInvalidArgument) {
  absl::StatusOr<std::string> garbage = InflateAll("not gzip at all", ContentCoding::kGzip);
  ASSERT_FALSE(garbage.ok());
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(garbage.status().message(), HasSubstr("not valid gzip data"));

  absl::StatusOr<std::string> truncated =
      InflateAll(kGzip.substr(0, kGzip.size() - 6), ContentCoding::kGzip);
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(truncated.status().message(), HasSubstr("truncated"));

  absl::StatusOr<std::string> trailing = InflateAll(kZlib + "xyz", ContentCoding::kDeflate);
  ASSERT_FALSE(trailing.ok());
  EXPECT_THAT(trailing.status().message(), HasSubstr("3 bytes after the end"));

  // gzip data announced as deflate (the zlib format) is refused, not guessed.
  EXPECT_FALSE(InflateAll(kGzip, ContentCoding::kDeflate).ok());
}

TEST(ContentCodingTest, ABombStopsAtTheLimitAndTheBudgetIsAskedFirst) {
  // 16 MiB of zeros: under 128 KiB of gzip at level 1 (over 128:1).
  const std::string zeros(16 << 20, '\0');
  const std::string bomb = Deflate(zeros, ContentCoding::kGzip).value();
  ASSERT_LT(bomb.size(), 128u << 10);

  uint64_t asked = 0;
  uint64_t reserved = 0;
  absl::StatusOr<std::string> limited = Inflate(
      bomb, ContentCoding::kGzip, 1 << 20, "--http-max-body-bytes",
      [&asked](uint64_t bytes) {
        asked += bytes;
        return true;
      },
      &reserved);
  ASSERT_FALSE(limited.ok());
  EXPECT_EQ(limited.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(limited.status().message(),
              HasSubstr("inflates to more than 1048576 bytes (--http-max-body-bytes)"));
  EXPECT_EQ(asked, reserved);
  EXPECT_LE(reserved, 1u << 20);  // never more than the limit was taken

  // The budget says no part way: Unavailable, and only what it granted is reported.
  uint64_t granted = 0;
  absl::StatusOr<std::string> refused = Inflate(
      bomb, ContentCoding::kGzip, 16 << 20, "--limit",
      [&granted](uint64_t bytes) {
        if (granted + bytes > (1 << 20)) return false;
        granted += bytes;
        return true;
      },
      &reserved);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(reserved, granted);

  // Within the limit, it inflates whole.
  absl::StatusOr<std::string> whole = InflateAll(bomb, ContentCoding::kGzip, 16 << 20);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, zeros);
}

}  // namespace
}  // namespace sluice::server::http
