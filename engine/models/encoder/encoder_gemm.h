#pragma once

// The CPU encoder's GEMM for its linear layers: Y[M, N] = X[M, K] W^T (+ bias), W in nn.Linear's
// [N, K] layout, packed once at load into the micro-kernel's panel layout (PackedWeights).
//
// Why our own: OpenBLAS (0.3.21, no pre-packed API) packs the weight matrix again in every call.
// At 128 rows (one sequence of 128 tokens) that repacking was 17% of a MiniLM forward pass and
// ONNX Runtime's MLAS, which packs its weights once per session, was 12-22% faster on the
// encoder's shapes; at 16 rows 1.5-1.7x (docs/performance-history.md, "Encoder backend").
//
// The layout: W's N rows in panels of kPanelWidth (16) columns of the product, each panel K x 16
// floats contiguous (row p of a panel holds W[j*16 .. j*16+15][p]), the last panel padded with
// zeros; 64-byte aligned, so one k step of a panel is one cache line. The layout does not depend
// on the micro-kernel: every variant reads the same PackedWeights (the AVX-512 one two panels at a
// time), so the variant can be chosen at run time and the weights are held once, with no
// row-major copy beside them.
//
// The product: M in blocks of 192 rows, N in blocks of 256 columns, K in blocks of <= 256; within
// a block each W panel (or pair) is reused by every MR-row tile of X (X is read in place,
// row-major, not packed: packing it measured no faster), and all K blocks of a column block run
// before the next, so the C block being accumulated stays in L2. The first tile of a column
// prefetches the next column's panels: W comes from memory in the encoder (a layer's weights were
// last read a whole forward pass ago), and without it the first tile waits (16 rows: 53 -> ~80
// GFLOP/s with cold weights). The micro-kernels are written once (encoder_gemm_impl.h) with
// GCC/Clang vector extensions and compiled per instruction set: AVX-512F (8 rows x 32 columns),
// AVX2 + FMA (6 x 16) and the build's baseline (4 x 16; SSE2 on x86-64, whatever the target has
// elsewhere: correct everywhere, but at ~25 GFLOP/s on this project's Zen 4 VM it is a fallback,
// not a rival to a tuned BLAS). Get() picks the best the CPU reports.
//
// Determinism: every element of Y is bias + the sum over p of X[i][p] W[j][p] in increasing p,
// in the same order of operations whatever M is and wherever row i falls in a tile, so a row's
// result does not depend on the other rows of the batch (its batch-mates) at all, on one variant.
// Variants differ in rounding (FMA vs mul + add).

#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "engine/core/compute_pool.h"

namespace sluice::engine::models::encoder {

inline constexpr int kPanelWidth = 16;

// How PackedWeights holds W. kBf16 (a model's `precision: bf16`, issue 36): each panel is
// ceil(K / 2) rows of 16 pairs of BF16 values (lane c of pair row q holds W[j*16 + c][2q] in its
// low half and W[j*16 + c][2q + 1] in its high half, K padded with a zero to even), 64 bytes per
// pair row, the operand layout of AVX-512 BF16's VDPBF16PS and of AMX's TDPBF16PS B tile (16 pair
// rows a tile, encoder_gemm_amx.h); rounded to nearest even at Pack. Half the bytes of kFp32.
// PackedGemm on kBf16 weights converts X to BF16 per row block and accumulates in FP32
// (encoder_gemm_bf16.cc).
//
// kInt8 (`precision: int8`): each row W_j quantized symmetrically to int8 with its own scale
// (scale_j = max|W_j| / 127, q = round(W / scale_j) in [-127, 127]); each panel is ceil(K / 4)
// rows of 16 quads (lane c of quad row q holds W[j*16 + c][4q .. 4q + 3], K padded with zeros to a
// multiple of 4), 64 bytes per quad row, the operand layout of AVX512-VNNI's VPDPBUSD and of AMX's
// TDPBUSD B tile. Beside it per column (padded to whole panels) the scale and the sum of the
// column's int8 values, for the activations' zero point (encoder_gemm_int8.cc). A quarter of
// kFp32's bytes, plus 8 per column.
//
// kFp32HeldBf16 / kFp32HeldFp16 (issue 31: a checkpoint stored in BF16 or FP16, Qwen3-Embedding's
// BF16 among them, is not inflated to FP32 at load): the FP32 product, on weights every value of
// which is exactly a BF16 (FP16) value, held as those 16 bits: half kFp32's bytes. Panels go in
// pairs (an odd last one paired with zeros), each pair K rows of 32 values, value 2c + t of row p
// being W[(2q + t) * 16 + c][p] for pair q: one 64-byte line per row, which one load and two
// integer operations widen into both panels' FP32 rows. PackedGemm widens each (column block, K
// block) of panels into a per-thread FP32 buffer, exactly, just before the FP32 micro-kernels read
// it, so the result is kFp32's to the bit; once per block of up to 192 rows, which costs a few
// percent at 128 rows and more at a handful (docs/performance.md, "Qwen3"). ExactFp32Storage says
// which of the three a matrix can be held in.
enum class WeightFormat : int { kFp32, kBf16, kInt8, kFp32HeldBf16, kFp32HeldFp16 };

// The most compact format of the FP32 product that holds `w` exactly: kFp32HeldBf16 where every
// value is a BF16 value (the low 16 bits of each FP32 are zero), else kFp32HeldFp16 where every
// value is an FP16 value (subnormals, infinities and NaN included), else kFp32. One pass over w,
// stopping at the first value that fits neither.
WeightFormat ExactFp32Storage(const std::vector<float>& w);
// Whether `format` computes in FP32 (kFp32 and the two held 16-bit forms).
inline bool IsFp32Product(WeightFormat format) {
  return format == WeightFormat::kFp32 || format == WeightFormat::kFp32HeldBf16 ||
         format == WeightFormat::kFp32HeldFp16;
}

// W [N, K] in panels (see the file comment). Move-only; immutable after Pack.
class PackedWeights {
 public:
  PackedWeights() = default;
  // Packs row-major `w` ([n, k], nn.Linear's layout). REQUIRES w.size() == n * k, n, k > 0; for
  // kFp32HeldFp16 every value exactly representable (ExactFp32Storage). kFp32HeldBf16 holds each
  // value rounded to the nearest BF16 (exact values unchanged), `precision: bf16`'s weights.
  static PackedWeights Pack(const std::vector<float>& w, int n, int k,
                            WeightFormat format = WeightFormat::kFp32);

  int n() const { return n_; }
  int k() const { return k_; }
  int panels() const { return (n_ + kPanelWidth - 1) / kPanelWidth; }
  // Floats from one panel to the next.
  int64_t panel_stride() const { return int64_t{k_} * kPanelWidth; }
  // The FP32 panels (kFp32 only; null otherwise).
  const float* data() const { return data_.get(); }
  // kFp32HeldBf16 / kFp32HeldFp16: the 16-bit panel pairs (see WeightFormat), null otherwise; pair
  // q starts 2 q panel_stride() values in.
  const uint16_t* held_data() const { return held_.get(); }
  int held_pairs() const { return (panels() + 1) / 2; }
  WeightFormat format() const { return format_; }
  // kBf16: the BF16 panels (16-bit values, see WeightFormat), null for kFp32; pair rows per
  // panel, and 16-bit values from one panel to the next.
  const uint16_t* bf16_data() const { return bf16_.get(); }
  int bf16_pairs() const { return (k_ + 1) / 2; }
  int64_t bf16_panel_stride() const { return int64_t{bf16_pairs()} * 2 * kPanelWidth; }
  // kInt8: the int8 panels (see WeightFormat), null otherwise; quad rows per panel, bytes from one
  // panel to the next; per column (panels() * 16 entries, zero past n) the scale and the sum of
  // the column's int8 values.
  const int8_t* int8_data() const { return int8_.get(); }
  int int8_quads() const { return (k_ + 3) / 4; }
  int64_t int8_panel_stride() const { return int64_t{int8_quads()} * 4 * kPanelWidth; }
  const float* int8_scales() const { return scales_.get(); }
  const int32_t* int8_sums() const { return sums_.get(); }
  bool empty() const { return n_ == 0; }
  // Bytes held (the padding of a last partial panel included).
  int64_t bytes() const;
  // Back to row-major [n, k] (tests; a backend that needs the plain layout). kBf16: the BF16
  // values widened; kInt8: the int8 values times their row's scale.
  std::vector<float> Unpack() const;

 private:
  struct AlignedDelete {
    template <typename T>
    void operator()(T* p) const {
      ::operator delete[](p, std::align_val_t{64});
    }
  };
  int n_ = 0;
  int k_ = 0;
  WeightFormat format_ = WeightFormat::kFp32;
  std::unique_ptr<float[], AlignedDelete> data_;
  std::unique_ptr<uint16_t[], AlignedDelete> bf16_;
  std::unique_ptr<uint16_t[], AlignedDelete> held_;
  std::unique_ptr<int8_t[], AlignedDelete> int8_;
  std::unique_ptr<float[], AlignedDelete> scales_;
  std::unique_ptr<int32_t[], AlignedDelete> sums_;
};

// FP32 -> BF16, rounded to nearest even (NaN stays a quiet NaN), and back.
uint16_t RoundToBf16(float value);
float Bf16ToFloat(uint16_t value);

namespace gemm {

// How a tile's accumulators start.
enum class TileInit : int { kZero, kBias, kLoad };

// One micro-kernel variant. tile[mr - 1][np - 1] computes C[mr, 16 * np] (row stride ldc)
// = init + X[mr, kc] (row stride ldx) x the kc x 16 panel rows at b (the second panel, np = 2, at
// b + panel_stride); init is 0, bias[0 .. 16 np) or C's own values. Where `prefetch` is not null
// the tile also prefetches kc rows of the np panels there (the next tile column's: W comes from
// memory, a whole forward pass after its last use, and the first tile of a column would otherwise
// wait for it: 10% of the rate at 128 rows).
using TileFn = void (*)(int kc, const float* x, int64_t ldx, const float* b, int64_t panel_stride,
                        float* c, int64_t ldc, const float* bias, TileInit init,
                        const float* prefetch);

// Widens `rows` rows of a 16-bit panel pair at src (kFp32HeldBf16 / kFp32HeldFp16's layout: 32
// values per row) into the two panels' FP32 rows (16 floats each) at lower and upper, exactly.
using WidenFn = void (*)(const uint16_t* src, int64_t rows, float* lower, float* upper);

struct GemmKernel {
  const char* name;  // "avx512f", "avx2-fma", "generic"
  int mr;            // rows per tile (<= kMaxRows)
  int np;            // panels per tile: 1 or 2
  TileFn tile[8][2];
  WidenFn widen_bf16;
  WidenFn widen_fp16;
};
inline constexpr int kMaxRows = 8;

// The variant this CPU runs best: AVX-512F, else AVX2 + FMA, else generic. Chosen once;
// SLUICE_ENCODER_GEMM=avx512f|avx2-fma|generic forces one (where the CPU has it; otherwise the
// best), and SLUICE_ENCODER_KERNELS=generic (the element-wise kernels' switch) forces generic too.
// The BF16 / INT8 products' variants follow the same switch: =amx runs AMX where the CPU has it
// (the default there), =avx512-bf16 / =avx512-vnni (or any FP32 variant's name) keeps them off AMX
// (encoder_gemm_amx.h), =generic runs the portable INT8 kernel.
const GemmKernel& Get();
const GemmKernel& Generic();
// nullptr where not built (non-x86-64) or the CPU lacks the instructions.
const GemmKernel* Avx2Fma();
const GemmKernel* Avx512();

// Whether this CPU runs the BF16 GEMM (kBf16 weights): AVX-512F/BW/VL and AVX512_BF16 (CPUID leaf
// 7 subleaf 1, EAX bit 5), on x86-64 builds by GCC or Clang. False elsewhere.
bool Bf16Supported();

// The peak rate of AVX-512 BF16's dot product (VDPBF16PS, 2 multiply-adds per lane) over AVX-512F
// FMA's (1 per lane) on this CPU, measured once (a few ms, on the first call): ~0.5 on this
// project's Intel Emerald Rapids VM (its VDPBF16PS issues at a quarter of the FMA's instruction
// rate), so that BF16 without AMX is slower there than FP32. Where AmxBf16Enabled(), TDPBF16PS's
// peak over FMA's instead (AmxPeakRates). 0 where !Bf16Supported(). `precision: auto` reads it.
double Bf16Speedup();

// The BF16 product's variants: AVX-512 BF16 (VDPBF16PS) and AMX (TDPBF16PS, encoder_gemm_amx.h,
// on the same packed weights). Bf16For(): kAmx where AmxBf16Enabled(), else kAvx512Bf16.
enum class Bf16Kernel : int { kAvx512Bf16, kAmx };
Bf16Kernel Bf16For();
const char* Bf16KernelName(Bf16Kernel kernel);  // "avx512-bf16", "amx"

// The BF16 product (REQUIRES Bf16Supported(); kAmx: AmxBf16Enabled()), with Bf16For() unless
// given: y[rows, n] (row stride ldy) = x[rows, k] (row
// stride ldx) rounded to BF16 x W^T (+ bias[n]), W's first n columns at `panels` in the kBf16
// layout with `panel_stride` 16-bit values between panels. Each y element is the sum over k in
// increasing pairs, in FP32, whatever `rows` is (a row's result does not depend on its
// batch-mates).
void Bf16PanelGemm(const float* x, int64_t ldx, int64_t rows, const uint16_t* panels,
                   int64_t panel_stride, int n, int k, const float* bias, float* y, int64_t ldy);
void Bf16PanelGemm(Bf16Kernel kernel, const float* x, int64_t ldx, int64_t rows,
                   const uint16_t* panels, int64_t panel_stride, int n, int k, const float* bias,
                   float* y, int64_t ldy);

// The INT8 product (kInt8 weights, encoder_gemm_int8.cc). Variants: kAvx512Vnni (VPDPBUSD; x86-64
// builds by GCC or Clang, CPUs with AVX-512F/BW/VL and AVX512_VNNI), kGeneric (portable C++,
// every CPU, several times slower than the FP32 GEMM) and kAmx (TDPBUSD, encoder_gemm_amx.h). All
// give the same bits.
enum class Int8Kernel : int { kGeneric, kAvx512Vnni, kAmx };
bool Int8VnniSupported();
// The variant PackedGemm runs on kInt8 weights: kAmx where AmxInt8Enabled(), else kAvx512Vnni
// where supported, unless the FP32 kernel it is given is Generic() (SLUICE_ENCODER_GEMM=generic,
// SLUICE_ENCODER_KERNELS=generic).
Int8Kernel Int8For(const GemmKernel& kernel);
const char* Int8KernelName(Int8Kernel kernel);  // "avx512-vnni", "generic", "amx"

// The peak rate of VPDPBUSD (4 multiply-adds per 32-bit lane) over AVX-512F FMA's (1 per lane) on
// this CPU, measured once (a few ms, on the first call); where AmxInt8Enabled(), TDPBUSD's over
// FMA's instead. 0 where !Int8VnniSupported() and AMX is off.
double Int8Speedup();

// y[rows, n] (row stride ldy) = dequantized (x[rows, k] (row stride ldx) quantized per row x W^T)
// (+ bias[n]): each row of x is quantized to u8 with its own scale and zero point (its range,
// widened to hold 0, over 255 values; round to nearest even), the products summed exactly in
// int32, the zero point removed with the weights' column sums, and the result scaled back to FP32
// by the row's and the column's scales. W's first n columns at `panels` in the kInt8 layout,
// `panel_stride` bytes between panels, `scales` and `sums` its per-column arrays (from the first
// column). A row's result does not depend on its batch-mates. REQUIRES kernel == kGeneric, or
// kAvx512Vnni and Int8VnniSupported(), or kAmx and AmxInt8Enabled(); x finite.
void Int8PanelGemm(Int8Kernel kernel, const float* x, int64_t ldx, int64_t rows,
                   const int8_t* panels, int64_t panel_stride, const float* scales,
                   const int32_t* sums, int n, int k, const float* bias, float* y, int64_t ldy);

}  // namespace gemm

// Writes the [n, k] matrix w (row stride ldw) into `out` in PackedWeights' panel layout:
// ceil(n / 16) panels of k x 16 floats, the last padded with zeros. `out` holds
// PanelFloats(n, k) floats. For operands packed per call (attention's keys).
int64_t PanelFloats(int n, int k);
void PackPanels(const float* w, int64_t ldw, int n, int k, float* out);
// The same for W = v^T, where v is [k, n] (row stride ldv): panel row p is v's row p, 16 columns
// at a time, so this is a copy of contiguous runs (attention's values, whose product with the
// probabilities needs V as the right-hand side).
void PackTransposedPanels(const float* v, int64_t ldv, int k, int n, float* out);

// y[rows, n] (row stride ldy) = x[rows, k] (row stride ldx) x W^T (+ bias[n] per row where bias
// is not null), W [n, k] in panels (PackPanels' layout), on the calling thread, with `kernel`.
// Each y element is summed in increasing k whatever `rows` is, so a row's result does not depend
// on the other rows.
void PanelGemm(const gemm::GemmKernel& kernel, const float* x, int64_t ldx, int64_t rows,
               const float* panels, int n, int k, const float* bias, float* y, int64_t ldy);

// PanelGemm on pairs of 16-bit panels (kFp32HeldBf16's layout, or kFp32HeldFp16's where `fp16`),
// widened block by block into a per-thread buffer: the same bits as PanelGemm on the widened
// panels. `pairs` points at the pair of W's first column.
void HeldPanelGemm(const gemm::GemmKernel& kernel, const float* x, int64_t ldx, int64_t rows,
                   const uint16_t* pairs, bool fp16, int n, int k, const float* bias, float* y,
                   int64_t ldy);

// y[rows, w.n()] (row stride w.n()) = x[rows, w.k()] (row stride w.k()) x W^T (+ bias[w.n()] per
// row where bias is not null), on the calling thread, with `kernel` (FP32-product weights; kBf16
// weights run gemm::Bf16PanelGemm whatever `kernel` is, kInt8 weights gemm::Int8PanelGemm with
// gemm::Int8For(kernel)).
void PackedGemm(const gemm::GemmKernel& kernel, const float* x, int64_t rows,
                const PackedWeights& w, const float* bias, float* y);
// The same with gemm::Get().
void PackedGemm(const float* x, int64_t rows, const PackedWeights& w, const float* bias, float* y);

// Below this many multiply-adds (rows x n x k) a product runs on the calling thread: a task's
// share would be shorter than the pool's hand-off (a few microseconds).
inline constexpr int64_t kMinPooledGemmWork = int64_t{1} << 18;

// The same product split over `pool` (null: on the calling thread): by row blocks of the GEMM's
// own row block and by column ranges of whole panel pairs, about three tasks per thread. Each task
// is a PanelGemm over its rows and columns, whose every element is summed as the whole product
// sums it, so the result is the same bits as the single-threaded PackedGemm.
void PackedGemm(ComputePool* pool, const gemm::GemmKernel& kernel, const float* x, int64_t rows,
                const PackedWeights& w, const float* bias, float* y,
                int64_t min_parallel_work = kMinPooledGemmWork);

}  // namespace sluice::engine::models::encoder
