// The packed GEMM's micro-kernels for AVX2 + FMA (6 rows x 16 columns: 12 ymm accumulators).
// CMake compiles this file with -mavx2 -mfma -ffp-contract=fast (x86-64 only); encoder_gemm.cc
// calls into it only after the CPU reported both features.
#define SLUICE_GEMM_NS avx2_fma
#define SLUICE_GEMM_NAME "avx2-fma"
#define SLUICE_GEMM_VEC 8
#define SLUICE_GEMM_MR 6
#define SLUICE_GEMM_NP 1
#include "engine/models/encoder/encoder_gemm_impl.h"
