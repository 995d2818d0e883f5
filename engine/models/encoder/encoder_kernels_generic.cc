// The encoder's element-wise kernels for the build's baseline instruction set (SSE2 on x86-64).
#define SLUICE_ENCODER_KERNEL_NS generic
#define SLUICE_ENCODER_KERNEL_NAME "generic"
#include "engine/models/encoder/encoder_kernels_impl.h"
