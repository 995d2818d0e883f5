#include "common/wire/float16.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace sluice::wire {
namespace {

TEST(Float16Test, KnownHalfValues) {
  EXPECT_EQ(FloatToHalf(1.f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.f), 0xc000);
  EXPECT_EQ(FloatToHalf(0.f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.f), 0x8000);
  EXPECT_EQ(FloatToHalf(65504.f), 0x7bff);                     // largest finite half
  EXPECT_EQ(FloatToHalf(65519.f), 0x7bff);                     // below the midpoint to 2^16
  EXPECT_EQ(FloatToHalf(65520.f), 0x7c00);                     // the midpoint rounds to infinity
  EXPECT_EQ(FloatToHalf(std::ldexp(1.f, -24)), 0x0001);        // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.f, -25)), 0x0000);        // tie between 0 and 2^-24: even
  EXPECT_EQ(FloatToHalf(std::ldexp(3.f, -26)), 0x0001);        // 1.5 x 2^-25: above the tie
  EXPECT_EQ(FloatToHalf(std::ldexp(1.f, -14)), 0x0400);        // smallest normal
  EXPECT_EQ(FloatToHalf(1.f + std::ldexp(1.f, -11)), 0x3c00);  // tie: even mantissa
  EXPECT_EQ(FloatToHalf(1.f + 3 * std::ldexp(1.f, -11)), 0x3c02);  // tie: rounds up to even
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.f, -24));
  EXPECT_EQ(HalfToFloat(0xfc00), -std::numeric_limits<float>::infinity());
}

TEST(Float16Test, EveryHalfRoundTripsExactly) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint16_t half = static_cast<uint16_t>(bits);
    const float value = HalfToFloat(half);
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(value)))) << bits;
      continue;
    }
    ASSERT_EQ(FloatToHalf(value), half) << "bits " << bits;
  }
}

TEST(Float16Test, EveryBFloat16RoundTripsExactly) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint16_t bf = static_cast<uint16_t>(bits);
    const float value = BFloat16ToFloat(bf);
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(value)))) << bits;
      continue;
    }
    ASSERT_EQ(FloatToBFloat16(value), bf) << "bits " << bits;
  }
}

TEST(Float16Test, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(1.f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even mantissa (1).
  EXPECT_EQ(FloatToBFloat16(1.f + std::ldexp(1.f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.f + 3 * std::ldexp(1.f, -8)), 0x3f82);
  EXPECT_EQ(FloatToBFloat16(1.f + std::ldexp(1.f, -8) + std::ldexp(1.f, -20)), 0x3f81);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to infinity
}

TEST(Float16Test, RandomFloatsRoundToTheNearestHalf) {
  uint32_t state = 12345;
  for (int i = 0; i < 100000; ++i) {
    state = state * 1664525u + 1013904223u;
    const float value = std::ldexp(static_cast<float>(state >> 8) / (1 << 24) - 0.5f,
                                   static_cast<int>(state % 40) - 25);
    const float rounded = HalfToFloat(FloatToHalf(value));
    // No other half is closer: compare with the neighbours of the result.
    const uint16_t bits = FloatToHalf(value);
    const float error = std::fabs(rounded - value);
    for (int delta : {-1, 1}) {
      const uint16_t neighbour = static_cast<uint16_t>(bits + delta);
      const float other = HalfToFloat(neighbour);
      if (std::isnan(other) || std::isinf(other) || ((neighbour ^ bits) & 0x8000) != 0) continue;
      ASSERT_LE(error, std::fabs(other - value)) << value;
    }
  }
}

}  // namespace
}  // namespace sluice::wire
