#pragma once

// Conversions between FP32 and the two 16-bit float formats of KServe tensors and weights files:
// IEEE 754 binary16 ("FP16", safetensors "F16") and bfloat16 ("BF16"). The one implementation:
// the engine's weights reader, the server and the client all use it. Pure functions, safe from
// any thread.

#include <cstdint>

namespace sluice::wire {

// Exact: every binary16 and bfloat16 value (subnormals, infinities, NaN) is representable in FP32.
float HalfToFloat(uint16_t bits);
float BFloat16ToFloat(uint16_t bits);

// Round to nearest, ties to even (what PyTorch's .half() / .bfloat16() do). Values too large for
// the format become infinity; NaN stays a (quiet) NaN with its sign.
uint16_t FloatToHalf(float value);
uint16_t FloatToBFloat16(float value);

}  // namespace sluice::wire
