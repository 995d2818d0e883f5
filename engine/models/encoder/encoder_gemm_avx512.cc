// The packed GEMM's micro-kernels for AVX-512F (8 rows x 32 columns, two panels: 16 zmm
// accumulators). CMake compiles this file with -mavx512f -mfma -ffp-contract=fast (x86-64 only);
// encoder_gemm.cc calls into it only after the CPU reported AVX-512F.
#define SLUICE_GEMM_NS avx512
#define SLUICE_GEMM_NAME "avx512f"
#define SLUICE_GEMM_VEC 16
#define SLUICE_GEMM_MR 8
#define SLUICE_GEMM_NP 2
#include "engine/models/encoder/encoder_gemm_impl.h"
