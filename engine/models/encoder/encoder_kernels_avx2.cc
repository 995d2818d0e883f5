// The encoder's element-wise kernels for AVX2 + FMA: CMake compiles this file with
// -mavx2 -mfma -ffp-contract=fast (x86-64 only); encoder_kernels.cc calls into it only after the
// CPU reported both features, so nothing here runs on a machine without them.
#define SLUICE_ENCODER_KERNEL_NS avx2_fma
#define SLUICE_ENCODER_KERNEL_NAME "avx2-fma"
#include "engine/models/encoder/encoder_kernels_impl.h"
