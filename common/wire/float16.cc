#include "common/wire/float16.h"

#include <bit>
#include <cmath>

namespace sluice::wire {

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) {  // infinity or NaN: keep the payload
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24, exact in FP32
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  // Normal: rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

float BFloat16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t FloatToHalf(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t magnitude = f & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  // 65520 (0x477ff000) is the midpoint between the largest half (65504) and 2^16: it and
  // everything above round to infinity.
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half (2^-14): a half subnormal, in units of 2^-24.
    const uint32_t exponent = magnitude >> 23;
    if (exponent < 102) return static_cast<uint16_t>(sign);  // under 2^-25: rounds to zero
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t result = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (result & 1u) != 0)) ++result;
    return static_cast<uint16_t>(sign | result);  // a carry into 0x400 is the smallest normal
  }
  // Normal: rebias the exponent (subtract 112 << 23) and drop 13 mantissa bits, rounding to
  // nearest even. A carry out of the mantissa correctly bumps the exponent.
  uint32_t result = (magnitude - 0x38000000u) >> 13;
  const uint32_t remainder = magnitude & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1u) != 0)) ++result;
  return static_cast<uint16_t>(sign | result);
}

uint16_t FloatToBFloat16(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);  // NaN
  const uint32_t rounding_bias = 0x7fffu + ((f >> 16) & 1u);
  return static_cast<uint16_t>((f + rounding_bias) >> 16);
}

}  // namespace sluice::wire
