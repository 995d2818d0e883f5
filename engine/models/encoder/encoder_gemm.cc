#include "engine/models/encoder/encoder_gemm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>

#if SLUICE_ENCODER_AVX2
#include <cpuid.h>
#endif

#include "common/check.h"
#include "common/wire/float16.h"

namespace sluice::engine::models::encoder {
namespace gemm {
namespace generic {
extern const GemmKernel kKernel;
}  // namespace generic
#if SLUICE_ENCODER_AVX2
namespace avx2_fma {
extern const GemmKernel kKernel;
}  // namespace avx2_fma
namespace avx512 {
extern const GemmKernel kKernel;
}  // namespace avx512
#endif

const GemmKernel& Generic() { return generic::kKernel; }

const GemmKernel* Avx2Fma() {
#if SLUICE_ENCODER_AVX2
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported ? &avx2_fma::kKernel : nullptr;
#else
  return nullptr;
#endif
}

const GemmKernel* Avx512() {
#if SLUICE_ENCODER_AVX2
  static const bool supported = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  return supported ? &avx512::kKernel : nullptr;
#else
  return nullptr;
#endif
}

bool Bf16Supported() {
#if SLUICE_ENCODER_AVX2
  static const bool supported = [] {
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl")) {
      return false;
    }
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) == 0) return false;
    return (eax & (1u << 5)) != 0;  // AVX512_BF16
  }();
  return supported;
#else
  return false;
#endif
}

bool Int8VnniSupported() {
#if SLUICE_ENCODER_AVX2
  static const bool supported =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return supported;
#else
  return false;
#endif
}

#if !SLUICE_ENCODER_AVX2
double Bf16Speedup() { return 0.0; }

void Bf16PanelGemm(const float*, int64_t, int64_t, const uint16_t*, int64_t, int, int, const float*,
                   float*, int64_t) {
  CHECK(false && "the BF16 GEMM is not built for this CPU architecture");
}
#endif

const GemmKernel& Get() {
  static const GemmKernel& chosen = []() -> const GemmKernel& {
    const GemmKernel* best = Avx512() != nullptr ? Avx512() : Avx2Fma();
    if (best == nullptr) best = &Generic();
    const char* forced = std::getenv("SLUICE_ENCODER_GEMM");
    if (forced != nullptr) {
      for (const GemmKernel* k : {Avx512(), Avx2Fma(), &Generic()}) {
        if (k != nullptr && std::strcmp(forced, k->name) == 0) return *k;
      }
      return *best;
    }
    const char* kernels = std::getenv("SLUICE_ENCODER_KERNELS");
    if (kernels != nullptr && std::strcmp(kernels, "generic") == 0) return Generic();
    return *best;
  }();
  return chosen;
}

}  // namespace gemm

namespace {

// K per block: a tile's two W panels for one block (kc x 32 floats) stay in L1 / L2 while every
// MR-row tile of the M block passes over them. K is split into equal blocks of at most kKc
// (384 -> 2 x 192, 1536 -> 6 x 256) rather than kKc and a short remainder.
constexpr int kKc = 256;
// Rows per M block: the X block (kMc x kc floats, 192 KiB) stays in L2 while every W panel of
// the block passes over it. A multiple of every variant's MR (4, 6, 8).
constexpr int64_t kMc = 192;
// Panels per column block (a multiple of every variant's np): all K blocks of one column block run
// before the next, so that the C block the K blocks accumulate into (kMc x 256 floats, 192 KiB)
// stays in L2 rather than the whole kMc x N (1.2 MiB for MiniLM's intermediate GEMM, 2.3 MiB for
// BERT-base's).
constexpr int kNcPanels = 16;

}  // namespace

int64_t PanelFloats(int n, int k) {
  return int64_t{(n + kPanelWidth - 1) / kPanelWidth} * k * kPanelWidth;
}

void PackPanels(const float* w, int64_t ldw, int n, int k, float* out) {
  const int panels = (n + kPanelWidth - 1) / kPanelWidth;
  for (int panel = 0; panel < panels; ++panel) {
    for (int p = 0; p < k; ++p) {
      for (int c = 0; c < kPanelWidth; ++c) {
        const int row = panel * kPanelWidth + c;
        *out++ = row < n ? w[int64_t{row} * ldw + p] : 0.0f;
      }
    }
  }
}

void PackTransposedPanels(const float* v, int64_t ldv, int k, int n, float* out) {
  const int panels = (n + kPanelWidth - 1) / kPanelWidth;
  for (int panel = 0; panel < panels; ++panel) {
    const int col = panel * kPanelWidth;
    const int width = std::min(kPanelWidth, n - col);
    for (int p = 0; p < k; ++p) {
      const float* row = v + int64_t{p} * ldv + col;
      std::copy_n(row, width, out);
      std::fill(out + width, out + kPanelWidth, 0.0f);
      out += kPanelWidth;
    }
  }
}

uint16_t RoundToBf16(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float Bf16ToFloat(uint16_t value) {
  const uint32_t bits = uint32_t{value} << 16;
  float out = 0;
  std::memcpy(&out, &bits, 4);
  return out;
}

namespace {

uint32_t BitsOf(float value) { return std::bit_cast<uint32_t>(value); }

// Whether `bits` (an FP32) is exactly an IEEE binary16 value.
bool IsHalfValue(uint32_t bits) {
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude == 0x7f800000u) return true;  // infinity
  if (magnitude > 0x7f800000u) {
    // NaN: only the one FloatToHalf gives back unchanged (the quiet NaN without payload).
    return std::bit_cast<uint32_t>(
               wire::HalfToFloat(wire::FloatToHalf(std::bit_cast<float>(bits)))) == bits;
  }
  if (magnitude == 0) return true;
  const int exponent = static_cast<int>(magnitude >> 23) - 127;
  if (exponent > 15 || exponent < -24) return false;
  // binary16 keeps 10 fraction bits for normals (exponent >= -14), fewer below: a subnormal is a
  // multiple of 2^-24.
  const int dropped = exponent >= -14 ? 13 : 13 + (-14 - exponent);
  return (magnitude & ((1u << dropped) - 1)) == 0;
}

}  // namespace

WeightFormat ExactFp32Storage(const std::vector<float>& w) {
  uint32_t low_bits = 0;
  for (float v : w) low_bits |= BitsOf(v) & 0xffffu;
  if (low_bits == 0) return WeightFormat::kFp32HeldBf16;
  for (float v : w) {
    if (!IsHalfValue(BitsOf(v))) return WeightFormat::kFp32;
  }
  return WeightFormat::kFp32HeldFp16;
}

PackedWeights PackedWeights::Pack(const std::vector<float>& w, int n, int k, WeightFormat format) {
  CHECK(n > 0 && k > 0 && static_cast<int64_t>(w.size()) == int64_t{n} * k);
  PackedWeights packed;
  packed.n_ = n;
  packed.k_ = k;
  packed.format_ = format;
  if (format == WeightFormat::kBf16) {
    const int64_t values = packed.bytes() / 2;
    packed.bf16_.reset(new (std::align_val_t{64}) uint16_t[static_cast<size_t>(values)]);
    uint16_t* out = packed.bf16_.get();
    for (int panel = 0; panel < packed.panels(); ++panel) {
      for (int q = 0; q < packed.bf16_pairs(); ++q) {
        for (int c = 0; c < kPanelWidth; ++c) {
          const int row = panel * kPanelWidth + c;
          for (int p = 2 * q; p < 2 * q + 2; ++p) {
            *out++ = row < n && p < k ? RoundToBf16(w[static_cast<size_t>(int64_t{row} * k + p)])
                                      : uint16_t{0};
          }
        }
      }
    }
    return packed;
  }
  if (format == WeightFormat::kInt8) {
    const int padded = packed.panels() * kPanelWidth;
    packed.int8_.reset(new (std::align_val_t{
        64}) int8_t[static_cast<size_t>(packed.panels() * packed.int8_panel_stride())]);
    packed.scales_.reset(new (std::align_val_t{64}) float[static_cast<size_t>(padded)]);
    packed.sums_.reset(new (std::align_val_t{64}) int32_t[static_cast<size_t>(padded)]);
    std::vector<int8_t> q(static_cast<size_t>(k));
    for (int row = 0; row < padded; ++row) {
      float amax = 0.0f;
      const float* src = row < n ? w.data() + int64_t{row} * k : nullptr;
      for (int p = 0; src != nullptr && p < k; ++p) amax = std::max(amax, std::fabs(src[p]));
      // Symmetric, per output channel: the row's largest magnitude maps to 127.
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      int32_t sum = 0;
      for (int p = 0; p < k; ++p) {
        const float v = src != nullptr ? std::nearbyint(src[p] * inv) : 0.0f;
        q[p] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
        sum += q[p];
      }
      packed.scales_[row] = amax / 127.0f;
      packed.sums_[row] = sum;
      int8_t* panel = packed.int8_.get() + (row / kPanelWidth) * packed.int8_panel_stride() +
                      4 * (row % kPanelWidth);
      for (int quad = 0; quad < packed.int8_quads(); ++quad) {
        for (int t = 0; t < 4; ++t) {
          const int p = 4 * quad + t;
          panel[quad * 4 * kPanelWidth + t] = p < k ? q[p] : int8_t{0};
        }
      }
    }
    return packed;
  }
  if (format == WeightFormat::kFp32HeldBf16 || format == WeightFormat::kFp32HeldFp16) {
    const bool fp16 = format == WeightFormat::kFp32HeldFp16;
    packed.held_.reset(new (std::align_val_t{
        64}) uint16_t[static_cast<size_t>(packed.held_pairs() * 2 * packed.panel_stride())]);
    uint16_t* out = packed.held_.get();
    for (int pair = 0; pair < packed.held_pairs(); ++pair) {
      for (int p = 0; p < k; ++p) {
        for (int slot = 0; slot < 2 * kPanelWidth; ++slot) {
          const int row = (2 * pair + slot % 2) * kPanelWidth + slot / 2;
          if (row >= n) {
            *out++ = 0;
            continue;
          }
          const float v = w[static_cast<size_t>(int64_t{row} * k + p)];
          // FP16: exact values, which its rounding returns (the format's precondition). BF16: an
          // exact value is its high half (taken as is, so that any NaN payload survives); any
          // other is rounded to nearest even (`precision: bf16` on an FP32 checkpoint).
          const uint32_t v_bits = BitsOf(v);
          const uint16_t bits = fp16                      ? wire::FloatToHalf(v)
                                : (v_bits & 0xffffu) == 0 ? static_cast<uint16_t>(v_bits >> 16)
                                                          : RoundToBf16(v);
          CHECK(!fp16 || BitsOf(wire::HalfToFloat(bits)) == v_bits);
          *out++ = bits;
        }
      }
    }
    return packed;
  }
  const int64_t floats = packed.bytes() / 4;
  packed.data_.reset(new (std::align_val_t{64}) float[static_cast<size_t>(floats)]);
  PackPanels(w.data(), k, n, k, packed.data_.get());
  return packed;
}

int64_t PackedWeights::bytes() const {
  switch (format_) {
    case WeightFormat::kBf16:
      return int64_t{panels()} * bf16_panel_stride() * 2;
    case WeightFormat::kInt8:
      // The panels, and a float scale and an int32 sum per (padded) column.
      return int64_t{panels()} * (int8_panel_stride() + kPanelWidth * 8);
    case WeightFormat::kFp32HeldBf16:
    case WeightFormat::kFp32HeldFp16:
      return int64_t{held_pairs()} * 2 * panel_stride() * 2;
    case WeightFormat::kFp32:
      break;
  }
  return int64_t{panels()} * panel_stride() * 4;
}

std::vector<float> PackedWeights::Unpack() const {
  std::vector<float> w(static_cast<size_t>(int64_t{n_} * k_));
  if (format_ == WeightFormat::kInt8) {
    for (int row = 0; row < n_; ++row) {
      const int8_t* panel =
          int8_data() + (row / kPanelWidth) * int8_panel_stride() + 4 * (row % kPanelWidth);
      for (int p = 0; p < k_; ++p) {
        w[static_cast<size_t>(int64_t{row} * k_ + p)] =
            static_cast<float>(panel[(p / 4) * 4 * kPanelWidth + p % 4]) * scales_[row];
      }
    }
    return w;
  }
  if (format_ == WeightFormat::kBf16) {
    for (int row = 0; row < n_; ++row) {
      const uint16_t* panel =
          bf16_data() + (row / kPanelWidth) * bf16_panel_stride() + 2 * (row % kPanelWidth);
      for (int p = 0; p < k_; ++p) {
        w[static_cast<size_t>(int64_t{row} * k_ + p)] =
            Bf16ToFloat(panel[(p / 2) * 2 * kPanelWidth + p % 2]);
      }
    }
    return w;
  }
  if (format_ == WeightFormat::kFp32HeldBf16 || format_ == WeightFormat::kFp32HeldFp16) {
    for (int row = 0; row < n_; ++row) {
      const int panel = row / kPanelWidth;
      const uint16_t* pair =
          held_data() + (panel / 2) * 2 * panel_stride() + 2 * (row % kPanelWidth) + panel % 2;
      for (int p = 0; p < k_; ++p) {
        const uint16_t bits = pair[p * 2 * kPanelWidth];
        w[static_cast<size_t>(int64_t{row} * k_ + p)] =
            format_ == WeightFormat::kFp32HeldFp16 ? wire::HalfToFloat(bits) : Bf16ToFloat(bits);
      }
    }
    return w;
  }
  for (int row = 0; row < n_; ++row) {
    const float* panel = data() + (row / kPanelWidth) * panel_stride() + row % kPanelWidth;
    for (int p = 0; p < k_; ++p)
      w[static_cast<size_t>(int64_t{row} * k_ + p)] = panel[p * kPanelWidth];
  }
  return w;
}

namespace {

// Where the tiles of one tile column (np panels at K rows [pc, pc + kc)) read W.
struct TileColumn {
  const float* panels;  // the first panel, at row pc
  int64_t stride;       // floats from one panel to the next
  // What the column's first tile prefetches (the next column's panels, where they come from
  // memory), or null.
  const float* prefetch;
};

// The blocked product of PanelGemm's comment, each tile column's panels from
// column_of(jp, np, jc, jc_end, pc, kc) (panels [jp, jp + np) of the column block [jc, jc_end)).
template <typename ColumnOf>
void BlockedGemm(const gemm::GemmKernel& kernel, const float* x, int64_t ldx, int64_t rows, int n,
                 int k, const float* bias, float* y, int64_t ldy, const ColumnOf& column_of) {
  const int panels = (n + kPanelWidth - 1) / kPanelWidth;
  const int k_blocks = (k + kKc - 1) / kKc;
  const int kc_even = (k + k_blocks - 1) / k_blocks;
  // A tile whose columns run past n (the last, partial panel) is computed into `edge` and copied.
  alignas(64) float edge[gemm::kMaxRows * 2 * kPanelWidth];
  alignas(64) float edge_bias[2 * kPanelWidth];
  for (int64_t ic = 0; ic < rows; ic += kMc) {
    const int64_t mc = std::min(kMc, rows - ic);
    for (int jc = 0; jc < panels; jc += kNcPanels) {
      const int jc_end = std::min(panels, jc + kNcPanels);
      for (int pc = 0; pc < k; pc += kc_even) {
        const int kc = std::min(kc_even, k - pc);
        const gemm::TileInit init = pc > 0            ? gemm::TileInit::kLoad
                                    : bias != nullptr ? gemm::TileInit::kBias
                                                      : gemm::TileInit::kZero;
        for (int jp = jc; jp < jc_end; jp += kernel.np) {
          const int np = std::min(kernel.np, panels - jp);
          const int col = jp * kPanelWidth;
          const int width = std::min(np * kPanelWidth, n - col);
          const TileColumn column = column_of(jp, np, jc, jc_end, pc, kc);
          const float* tile_bias = bias != nullptr ? bias + col : nullptr;
          if (width < np * kPanelWidth && init == gemm::TileInit::kBias) {
            std::fill_n(edge_bias, 2 * kPanelWidth, 0.0f);
            std::copy_n(bias + col, width, edge_bias);
            tile_bias = edge_bias;
          }
          for (int64_t ir = 0; ir < mc; ir += kernel.mr) {
            const int mr = static_cast<int>(std::min<int64_t>(kernel.mr, mc - ir));
            const gemm::TileFn tile = kernel.tile[mr - 1][np - 1];
            const float* xt = x + (ic + ir) * ldx + pc;
            float* yt = y + (ic + ir) * ldy + col;
            if (width == np * kPanelWidth) {
              tile(kc, xt, ldx, column.panels, column.stride, yt, ldy, tile_bias, init,
                   ir == 0 ? column.prefetch : nullptr);
              continue;
            }
            const int ld = np * kPanelWidth;
            if (init == gemm::TileInit::kLoad) {
              for (int r = 0; r < mr; ++r) std::copy_n(yt + r * ldy, width, edge + r * ld);
            }
            tile(kc, xt, ldx, column.panels, column.stride, edge, ld, tile_bias, init, nullptr);
            for (int r = 0; r < mr; ++r) std::copy_n(edge + r * ld, width, yt + r * ldy);
          }
        }
      }
    }
  }
}

// A per-thread buffer of one widened panel pair (<= kKc rows of 2 x 16 floats: 32 KiB, which the
// tiles then read from L1; widening a whole column block at once spilled it to L2 and cost 17% at
// 16 rows).
float* WidenedPairBuffer() {
  struct Buffer {
    std::unique_ptr<float[], void (*)(float*)> floats{
        new (std::align_val_t{64}) float[size_t{2} * kKc * kPanelWidth],
        [](float* p) { ::operator delete[](p, std::align_val_t{64}); }};
  };
  thread_local Buffer buffer;
  return buffer.floats.get();
}

}  // namespace

void PanelGemm(const gemm::GemmKernel& kernel, const float* x, int64_t ldx, int64_t rows,
               const float* packed, int n, int k, const float* bias, float* y, int64_t ldy) {
  const int panels = (n + kPanelWidth - 1) / kPanelWidth;
  const int64_t stride = int64_t{k} * kPanelWidth;
  BlockedGemm(kernel, x, ldx, rows, n, k, bias, y, ldy,
              [&](int jp, int np, int jc, int jc_end, int pc, int kc) {
                const float* b = packed + jp * stride + int64_t{pc} * kPanelWidth;
                // The next tile column in the column block, else the block's first at the next K
                // block, else the next column block's first.
                const float* next = nullptr;
                if (jp + np < jc_end) {
                  next = b + np * stride;
                } else if (pc + kc < k) {
                  next = packed + jc * stride + int64_t{pc + kc} * kPanelWidth;
                } else if (jc_end < panels) {
                  next = packed + jc_end * stride;
                }
                return TileColumn{b, stride, next};
              });
}

void HeldPanelGemm(const gemm::GemmKernel& kernel, const float* x, int64_t ldx, int64_t rows,
                   const uint16_t* pairs, bool fp16, int n, int k, const float* bias, float* y,
                   int64_t ldy) {
  const int64_t pair_stride = int64_t{k} * 2 * kPanelWidth;
  const gemm::WidenFn widen = fp16 ? kernel.widen_fp16 : kernel.widen_bf16;
  float* buffer = WidenedPairBuffer();
  BlockedGemm(kernel, x, ldx, rows, n, k, bias, y, ldy,
              [&](int jp, int /*np*/, int /*jc*/, int /*jc_end*/, int pc, int kc) {
                // A pair is widened when its lower panel's column comes (every column of a
                // two-panel kernel; a one-panel kernel reads the upper panel next, from the
                // buffer). A last odd panel's partner is padding, widened and never read.
                const int64_t block_stride = int64_t{kc} * kPanelWidth;
                if (jp % 2 == 0) {
                  widen(pairs + (jp / 2) * pair_stride + int64_t{pc} * 2 * kPanelWidth, kc, buffer,
                        buffer + block_stride);
                }
                return TileColumn{buffer + (jp % 2) * block_stride, block_stride, nullptr};
              });
}

void PackedGemm(const gemm::GemmKernel& kernel, const float* x, int64_t rows,
                const PackedWeights& w, const float* bias, float* y) {
  if (w.format() == WeightFormat::kBf16) {
    gemm::Bf16PanelGemm(x, w.k(), rows, w.bf16_data(), w.bf16_panel_stride(), w.n(), w.k(), bias, y,
                        w.n());
    return;
  }
  if (w.format() == WeightFormat::kInt8) {
    gemm::Int8PanelGemm(gemm::Int8For(kernel), x, w.k(), rows, w.int8_data(), w.int8_panel_stride(),
                        w.int8_scales(), w.int8_sums(), w.n(), w.k(), bias, y, w.n());
    return;
  }
  if (w.format() != WeightFormat::kFp32) {
    HeldPanelGemm(kernel, x, w.k(), rows, w.held_data(), w.format() == WeightFormat::kFp32HeldFp16,
                  w.n(), w.k(), bias, y, w.n());
    return;
  }
  PanelGemm(kernel, x, w.k(), rows, w.data(), w.n(), w.k(), bias, y, w.n());
}

void PackedGemm(const float* x, int64_t rows, const PackedWeights& w, const float* bias, float* y) {
  PackedGemm(gemm::Get(), x, rows, w, bias, y);
}

void PackedGemm(ComputePool* pool, const gemm::GemmKernel& g, const float* x, int64_t rows,
                const PackedWeights& w, const float* bias, float* y, int64_t min_parallel_work) {
  const int threads = pool == nullptr ? 1 : pool->threads();
  if (threads == 1 || rows * w.n() * int64_t{w.k()} < min_parallel_work) {
    PackedGemm(g, x, rows, w, bias, y);
    return;
  }
  const int64_t kRowBlock = kMc;  // the GEMM's own row block
  const int64_t row_blocks = (rows + kRowBlock - 1) / kRowBlock;
  const int groups_of_two = (w.panels() + 1) / 2;
  // About three tasks per thread, so that a thread delayed by other work (tokenization, the
  // network) leaves its share to the others.
  const int want = 3 * threads;
  const int column_tasks =
      static_cast<int>(std::clamp<int64_t>((want + row_blocks - 1) / row_blocks, 1, groups_of_two));
  const int tasks = static_cast<int>(row_blocks) * column_tasks;
  const int64_t stride = w.panel_stride();
  pool->ParallelFor(tasks, [&](int task, int) {
    const int64_t rb = task / column_tasks;
    const int ct = task % column_tasks;
    const int64_t r0 = rb * kRowBlock;
    const int64_t r = std::min(kRowBlock, rows - r0);
    const int first_panel = 2 * (groups_of_two * ct / column_tasks);
    const int end_panel = std::min(w.panels(), 2 * (groups_of_two * (ct + 1) / column_tasks));
    if (end_panel <= first_panel) return;
    const int col = first_panel * kPanelWidth;
    const int n = std::min(w.n(), end_panel * kPanelWidth) - col;
    if (w.format() == WeightFormat::kBf16) {
      gemm::Bf16PanelGemm(x + r0 * w.k(), w.k(), r,
                          w.bf16_data() + first_panel * w.bf16_panel_stride(),
                          w.bf16_panel_stride(), n, w.k(), bias != nullptr ? bias + col : nullptr,
                          y + r0 * w.n() + col, w.n());
      return;
    }
    if (w.format() == WeightFormat::kInt8) {
      gemm::Int8PanelGemm(gemm::Int8For(g), x + r0 * w.k(), w.k(), r,
                          w.int8_data() + first_panel * w.int8_panel_stride(),
                          w.int8_panel_stride(), w.int8_scales() + col, w.int8_sums() + col, n,
                          w.k(), bias != nullptr ? bias + col : nullptr, y + r0 * w.n() + col,
                          w.n());
      return;
    }
    if (w.format() != WeightFormat::kFp32) {
      // first_panel is even: the pair first_panel / 2 starts first_panel panel strides in.
      HeldPanelGemm(g, x + r0 * w.k(), w.k(), r, w.held_data() + first_panel * stride,
                    w.format() == WeightFormat::kFp32HeldFp16, n, w.k(),
                    bias != nullptr ? bias + col : nullptr, y + r0 * w.n() + col, w.n());
      return;
    }
    PanelGemm(g, x + r0 * w.k(), w.k(), r, w.data() + first_panel * stride, n, w.k(),
              bias != nullptr ? bias + col : nullptr, y + r0 * w.n() + col, w.n());
  });
}

}  // namespace sluice::engine::models::encoder
