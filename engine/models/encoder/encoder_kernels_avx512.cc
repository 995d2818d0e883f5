// The encoder's element-wise kernels for AVX-512F (16 lanes): CMake compiles this file with
// -mavx512f -mfma -ffp-contract=fast (x86-64 only); encoder_kernels.cc calls into it only after the
// CPU reported AVX-512F and FMA, so nothing here runs on a machine without them.
#define SLUICE_ENCODER_KERNEL_NS avx512
#define SLUICE_ENCODER_KERNEL_NAME "avx512f"
#include "engine/models/encoder/encoder_kernels_impl.h"
