// The packed GEMM's micro-kernels for the build's baseline instruction set (SSE2 on x86-64).
#define SLUICE_GEMM_NS generic
#define SLUICE_GEMM_NAME "generic"
#define SLUICE_GEMM_VEC 4
#define SLUICE_GEMM_MR 4
#define SLUICE_GEMM_NP 1
#include "engine/models/encoder/encoder_gemm_impl.h"
