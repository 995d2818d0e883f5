#pragma once

// The encoder's AMX GEMMs (issue 36): `precision: bf16` on TDPBF16PS and `precision: int8` on
// TDPBUSD, Intel's tile matrix instructions (Sapphire Rapids and later), chosen at run time over
// the AVX-512 BF16 / VNNI kernels (encoder_gemm_bf16.cc, encoder_gemm_int8.cc) where the CPU has
// them, the OS enables them and this process is granted them.
//
// No repacking: the packed weights are already B tiles. A kBf16 panel (encoder_gemm.h,
// WeightFormat) is ceil(K / 2) rows of 16 lanes x a BF16 pair, 64 bytes a row: TDPBF16PS's B
// operand is K/2 rows of 16 dwords, each a BF16 pair of one column, so 16 consecutive pair rows of
// a panel, stride 64 bytes, are one 16 x 16 B tile. A kInt8 panel (16 lanes x an int8 quad, 64
// bytes a row) is likewise TDPBUSD's B (s8 quads; the A operand u8, VPDPBUSD's signedness). The
// A tiles are the activations the AVX-512 kernels convert (BF16, round to nearest even) or quantize
// (u8 per row with a scale and zero point), 16 rows of 64 bytes; the epilogues (bias; the zero
// point taken back with the column sums, then both scales) are the AVX-512 kernels' arithmetic.
//
// The tile operations go through a thin layer (encoder_gemm_amx_kernel.h) with two
// implementations: the intrinsics (encoder_gemm_amx.cc, the only file built with -mamx-*) and a
// scalar emulator of Intel's documented semantics for the tests (encoder_gemm_amx_emulator.h,
// linked into tests only), so that the blocking and edge handling are tested on CPUs without AMX.
//
// Thread-safety: every function here is safe to call from any thread. Detection, the permission
// request and the self-check run once per process, on first use.

#include <cstdint>
#include <string>

#include "engine/models/encoder/encoder_gemm.h"

namespace sluice::engine::models::encoder::gemm {

// What this process may run. `hardware`: CPUID leaf 7 subleaf 0 EDX has AMX-TILE (bit 24),
// AMX-BF16 (22) and AMX-INT8 (25), the OS enabled XTILECFG and XTILEDATA in XCR0 (bits 17, 18),
// and arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) granted the tile data state (once per
// process; Linux >= 5.16). `bf16` / `int8`: `hardware`, and the kernel's load-time self-check (the
// tile configuration read back, then a small seeded product against the AVX-512 kernel) agreed.
// `reason`: why not, where one is false ("" where both are true).
struct AmxAvailability {
  bool hardware = false;
  bool bf16 = false;
  bool int8 = false;
  std::string reason;
};
const AmxAvailability& Amx();

// Whether PackedGemm runs AMX on kBf16 / kInt8 weights: Amx().bf16 / .int8 (or a test's kernels,
// SetAmxKernelsForTest), unless SLUICE_ENCODER_GEMM names another variant (anything but "amx":
// avx512-bf16, avx512-vnni, generic, avx512f, avx2-fma) or SLUICE_ENCODER_KERNELS=generic.
bool AmxBf16Enabled();
bool AmxInt8Enabled();

// The AMX products, with Bf16PanelGemm's / Int8PanelGemm's contracts and arguments, on the tile
// hardware. REQUIRES Amx().hardware.
void AmxBf16PanelGemm(const float* x, int64_t ldx, int64_t rows, const uint16_t* panels,
                      int64_t panel_stride, int n, int k, const float* bias, float* y, int64_t ldy);
void AmxInt8PanelGemm(const float* x, int64_t ldx, int64_t rows, const int8_t* panels,
                      int64_t panel_stride, const float* scales, const int32_t* sums, int n, int k,
                      const float* bias, float* y, int64_t ldy);

// The kernels PackedGemm's AMX dispatch runs. Test seam: SetAmxKernelsForTest(&k) makes
// AmxBf16Enabled() / AmxInt8Enabled() true (for the non-null members) and runs k's kernels (the
// emulated ones) instead of the hardware's, through PackedGemm, pooled or not; nullptr restores.
// Not for use while products run.
struct AmxKernels {
  void (*bf16)(const float* x, int64_t ldx, int64_t rows, const uint16_t* panels,
               int64_t panel_stride, int n, int k, const float* bias, float* y, int64_t ldy);
  void (*int8)(const float* x, int64_t ldx, int64_t rows, const int8_t* panels,
               int64_t panel_stride, const float* scales, const int32_t* sums, int n, int k,
               const float* bias, float* y, int64_t ldy);
};
void SetAmxKernelsForTest(const AmxKernels* kernels);
const AmxKernels* AmxKernelsForTest();

// Peak rates measured once on first call (a few ms): TDPBF16PS (FLOP/s) and TDPBUSD (OP/s: a
// multiply-add is 2), 4 independent accumulator tiles, against AVX-512F FMA (FLOP/s) on one core.
// All 0 where !Amx().hardware. Bf16Speedup() / Int8Speedup() report their ratios where AMX is
// enabled; the bench reports them against the GEMMs' achieved rates.
struct AmxPeaks {
  double bf16_flops_per_s = 0.0;
  double int8_ops_per_s = 0.0;
  double fp32_fma_flops_per_s = 0.0;
};
const AmxPeaks& AmxPeakRates();

// Shared with the AVX-512 kernels (defined in encoder_gemm_bf16.cc, encoder_gemm_int8.cc), so that
// AMX converts and quantizes activations by the same rules, to the same bits.
// rows x k floats of x (row stride ldx) -> BF16 at out (row stride ldo >= k rounded up to 16),
// round to nearest even, values from k to k rounded up to 16 zero. REQUIRES Bf16Supported().
void ConvertRowsToBf16(const float* x, int64_t ldx, int64_t rows, int k, uint16_t* out,
                       int64_t ldo);
// rows x k floats -> u8 at out (row stride ldo, a multiple of 64 >= k; the values past k the row's
// zero point), each row's scale and zero point: Int8PanelGemm's rule, with its fastest variant.
void QuantizeRowsToU8(const float* x, int64_t ldx, int64_t rows, int k, uint8_t* out, int64_t ldo,
                      float* scales, int32_t* zero_points);
// The epilogues, vectorized (AVX-512 where the CPU has it) and with the AVX-512 kernels' exact
// arithmetic, for `rows` x `width` (<= 32) accumulators at c (row stride ldc elements) into y (row
// stride ldy); bias, scales and sums from the block's first column. BF16: y = c (+ bias). INT8:
// y = fma(float(c - zero_point_r * sum) * scale, row_scale_r, bias or 0), Int8PanelGemm's bits.
void Bf16StoreRows(const float* c, int64_t ldc, int rows, int width, const float* bias, float* y,
                   int64_t ldy);
void Int8DequantizeRows(const int32_t* c, int64_t ldc, int rows, int width, const float* row_scales,
                        const int32_t* row_zero_points, const float* col_scales,
                        const int32_t* col_sums, const float* bias, float* y, int64_t ldy);

}  // namespace sluice::engine::models::encoder::gemm
