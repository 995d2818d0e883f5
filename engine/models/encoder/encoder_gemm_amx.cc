// The AMX GEMMs on the tile hardware (encoder_gemm_amx.h): detection, the OS permission, the
// intrinsics behind encoder_gemm_amx_kernel.h's Tiles layer, the load-time self-check and the
// peak measurement. The only file built with -mamx-tile -mamx-bf16 -mamx-int8 (x86-64, GCC or
// Clang; SLUICE_ENCODER_AVX2): those flags make the compiler accept the tile intrinsics but never
// make it emit tile instructions on its own, so no inline function of a header compiled here can
// carry one into the rest of the program. Nothing here runs a tile instruction unless
// Amx().hardware.
//
// Tile state is per thread: every product loads its configuration (LDTILECFG) on the thread that
// runs it and releases it (TILERELEASE) at its end, so a compute pool thread needs no set-up, a
// product never inherits another library's configuration, and a thread not multiplying holds no
// tile state (the kernel's XSAVE area for the 8 KiB of tile data is allocated per thread at the
// first tile instruction, once the process has the permission).

#include "engine/models/encoder/encoder_gemm_amx.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "common/check.h"
#include "engine/models/encoder/encoder_gemm_amx_kernel.h"

#if SLUICE_ENCODER_AVX2
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace sluice::engine::models::encoder::gemm {
namespace {

std::atomic<const AmxKernels*> test_kernels{nullptr};

// SLUICE_ENCODER_GEMM naming any variant but "amx", or SLUICE_ENCODER_KERNELS=generic.
bool SwitchedOff() {
  static const bool off = [] {
    const char* forced = std::getenv("SLUICE_ENCODER_GEMM");
    if (forced != nullptr && std::strcmp(forced, "amx") != 0) return true;
    const char* kernels = std::getenv("SLUICE_ENCODER_KERNELS");
    return kernels != nullptr && std::strcmp(kernels, "generic") == 0;
  }();
  return off;
}

#if SLUICE_ENCODER_AVX2
// Linux's arch_prctl codes and XSTATE component numbers (asm/prctl.h of Linux >= 5.16; spelled
// out for older headers).
constexpr int kArchGetXcompPerm = 0x1022;
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtilecfg = 17;
constexpr int kXfeatureXtiledata = 18;

uint64_t Xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

// "" where the CPU, the OS and the permission allow the tiles; else why not.
std::string HardwareReason() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return "no CPUID leaf 7";
  const bool tile = (edx & (1u << 24)) != 0, bf16 = (edx & (1u << 22)) != 0,
             int8 = (edx & (1u << 25)) != 0;
  if (!tile || !bf16 || !int8) return "the CPU reports no AMX-TILE/AMX-BF16/AMX-INT8";
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & (1u << 27)) == 0) {
    return "the OS has not enabled XSAVE (OSXSAVE)";
  }
  const uint64_t tiles = (uint64_t{1} << kXfeatureXtilecfg) | (uint64_t{1} << kXfeatureXtiledata);
  if ((Xcr0() & tiles) != tiles) return "the OS has not enabled the tile state in XCR0";
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    return std::string("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) failed: ") +
           std::strerror(errno);
  }
  unsigned long permitted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &permitted) != 0 ||
      (permitted & (1ul << kXfeatureXtiledata)) == 0) {
    return "the tile data state was not granted (ARCH_GET_XCOMP_PERM)";
  }
  return "";
}

// The tile intrinsics name their registers in the instruction text, so each operation is a chain
// of constant cases over the registers the kernel uses (C 0-3, A 4-5, B 6-7).
//
// Compiler barriers: GCC 12's intrinsics are inline assembly that does not tell the compiler
// which memory it reads. _tile_loadconfig declares a read of 8 bytes of the 64-byte configuration
// (the other 56 could be left unwritten, the configuration being a temporary nothing else reads),
// and _tile_loadd declares no memory read at all (the zero-padded K tail or the converted X rows
// could still sit in registers, or be dropped as dead). The emulator cannot show either; so the
// whole configuration is an operand of an empty asm before LDTILECFG, and each tile load is
// preceded by a "memory" clobber (no instruction: it only orders the compiler's stores first).
struct HardwareTiles {
  void Configure(const amx::TileConfig& config) {
    __asm__ volatile("" : : "m"(config) : "memory");
    _tile_loadconfig(&config);
  }
  void Release() { _tile_release(); }
  template <int T>
  void Zero() {
    static_assert(T >= 0 && T < 4);
    if constexpr (T == 0) _tile_zero(0);
    if constexpr (T == 1) _tile_zero(1);
    if constexpr (T == 2) _tile_zero(2);
    if constexpr (T == 3) _tile_zero(3);
  }
  template <int T>
  void Load(const void* base, int64_t stride) {
    static_assert(T >= 4 && T < 8);
    __asm__ volatile("" : : : "memory");
    if constexpr (T == 4) _tile_loadd(4, base, stride);
    if constexpr (T == 5) _tile_loadd(5, base, stride);
    if constexpr (T == 6) _tile_loadd(6, base, stride);
    if constexpr (T == 7) _tile_loadd(7, base, stride);
  }
  template <int T>
  void Store(void* base, int64_t stride) {
    static_assert(T >= 0 && T < 4);
    if constexpr (T == 0) _tile_stored(0, base, stride);
    if constexpr (T == 1) _tile_stored(1, base, stride);
    if constexpr (T == 2) _tile_stored(2, base, stride);
    if constexpr (T == 3) _tile_stored(3, base, stride);
  }
  template <int C, int A, int B>
  void DotBf16() {
    static_assert(C == 2 * (A - 4) + (B - 6));
    if constexpr (C == 0) _tile_dpbf16ps(0, 4, 6);
    if constexpr (C == 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (C == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (C == 3) _tile_dpbf16ps(3, 5, 7);
  }
  template <int C, int A, int B>
  void DotU8S8() {
    static_assert(C == 2 * (A - 4) + (B - 6));
    if constexpr (C == 0) _tile_dpbusd(0, 4, 6);
    if constexpr (C == 1) _tile_dpbusd(1, 4, 7);
    if constexpr (C == 2) _tile_dpbusd(2, 5, 6);
    if constexpr (C == 3) _tile_dpbusd(3, 5, 7);
  }
};

// `iters` steps of 4 independent TDPBF16PS / TDPBUSD (tiles of zeros: no denormals, no
// overflow) and of 12 independent VFMADD231PS zmm chains: the peaks AmxPeakRates compares.
void TileChains(int64_t iters, bool int8) {
  HardwareTiles t;
  t.Configure(amx::FullTiles());
  for (int64_t i = 0; i < iters; ++i) {
    if (int8) {
      _tile_dpbusd(0, 4, 6);
      _tile_dpbusd(1, 4, 7);
      _tile_dpbusd(2, 5, 6);
      _tile_dpbusd(3, 5, 7);
    } else {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  t.Release();
}

__attribute__((target("avx512f"), noinline)) void FmaChains(int64_t iters) {
  __asm__ volatile(
      "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
      "1:\n\t"
      ".irp r, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15\n\t"
      "vfmadd231ps %%zmm0, %%zmm0, %%zmm\\r\n\t"
      ".endr\n\t"
      "dec %0\n\t"
      "jnz 1b\n\t"
      : "+r"(iters)
      :
      : "xmm0", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",
        "xmm14", "xmm15", "cc");
}

template <typename Fn>
double BestSeconds(Fn fn) {
  double best = 1e30;
  for (int round = 0; round < 7; ++round) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

// The self-check: a seeded 45 x 70 x 37 product (every edge: a 13-row second tile block, a 3-wide
// last panel pair with an odd panel, a 3-row K tail) on the hardware against the AVX-512 kernel:
// INT8 bit for bit, BF16 within FP32 accumulation-order rounding. "" where they agree.
std::string SelfCheck(bool int8) {
  {
    // The configuration the kernels load reads back whole (STTILECFG): the check that the
    // compiler wrote all of it (see HardwareTiles) before the tiles are used.
    HardwareTiles t;
    const amx::TileConfig want = amx::FullTiles();
    amx::TileConfig got;
    t.Configure(want);
    _tile_storeconfig(&got);
    __asm__ volatile("" : "+m"(got) : : "memory");  // the intrinsic declares 8 bytes written
    t.Release();
    if (std::memcmp(&got, &want, sizeof got) != 0) {
      return "the tile configuration did not read back (STTILECFG)";
    }
  }
  constexpr int kRows = 45, kN = 37, kK = 70;
  std::mt19937 rng(36);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(kRows * kK), w(kN * kK), bias(kN);
  for (float& v : x) v = normal(rng);
  for (float& v : w) v = normal(rng);
  for (float& v : bias) v = normal(rng);
  std::vector<float> got(kRows * kN), want(kRows * kN);
  if (int8) {
    const PackedWeights p = PackedWeights::Pack(w, kN, kK, WeightFormat::kInt8);
    AmxInt8PanelGemm(x.data(), kK, kRows, p.int8_data(), p.int8_panel_stride(), p.int8_scales(),
                     p.int8_sums(), kN, kK, bias.data(), got.data(), kN);
    Int8PanelGemm(Int8VnniSupported() ? Int8Kernel::kAvx512Vnni : Int8Kernel::kGeneric, x.data(),
                  kK, kRows, p.int8_data(), p.int8_panel_stride(), p.int8_scales(), p.int8_sums(),
                  kN, kK, bias.data(), want.data(), kN);
    return std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0
               ? ""
               : "the AMX INT8 self-check differs from the VNNI kernel";
  }
  if (!Bf16Supported()) return "no AVX512_BF16 (the AMX BF16 kernel converts with it)";
  const PackedWeights p = PackedWeights::Pack(w, kN, kK, WeightFormat::kBf16);
  AmxBf16PanelGemm(x.data(), kK, kRows, p.bf16_data(), p.bf16_panel_stride(), kN, kK, bias.data(),
                   got.data(), kN);
  Bf16PanelGemm(Bf16Kernel::kAvx512Bf16, x.data(), kK, kRows, p.bf16_data(), p.bf16_panel_stride(),
                kN, kK, bias.data(), want.data(), kN);
  for (size_t i = 0; i < got.size(); ++i) {
    // |terms| ~ 1 each, 70 of them: FP32 order differences stay far below 1e-3.
    if (!(std::fabs(got[i] - want[i]) <= 1e-3f)) {
      return "the AMX BF16 self-check differs from the AVX-512 BF16 kernel";
    }
  }
  return "";
}
#endif  // SLUICE_ENCODER_AVX2

}  // namespace

const AmxAvailability& Amx() {
  static const AmxAvailability availability = [] {
    AmxAvailability a;
#if SLUICE_ENCODER_AVX2
    a.reason = HardwareReason();
    a.hardware = a.reason.empty();
    if (!a.hardware) return a;
    const std::string bf16 = SelfCheck(false);
    const std::string int8 = SelfCheck(true);
    a.bf16 = bf16.empty();
    a.int8 = int8.empty();
    a.reason = bf16.empty() ? int8 : int8.empty() ? bf16 : bf16 + "; " + int8;
    // One line, once per process: a kernel's first hardware run disagreed, and the product falls
    // back to the AVX-512 kernels.
    if (!a.reason.empty()) {
      std::fprintf(stderr, "encoder GEMM: AMX not used: %s\n", a.reason.c_str());
    }
#else
    a.reason = "not built for this CPU architecture";
#endif
    return a;
  }();
  return availability;
}

bool AmxBf16Enabled() {
  if (SwitchedOff()) return false;
  const AmxKernels* t = test_kernels.load(std::memory_order_acquire);
  return t != nullptr ? t->bf16 != nullptr : Amx().bf16;
}

bool AmxInt8Enabled() {
  if (SwitchedOff()) return false;
  const AmxKernels* t = test_kernels.load(std::memory_order_acquire);
  return t != nullptr ? t->int8 != nullptr : Amx().int8;
}

void SetAmxKernelsForTest(const AmxKernels* kernels) {
  test_kernels.store(kernels, std::memory_order_release);
}

const AmxKernels* AmxKernelsForTest() { return test_kernels.load(std::memory_order_acquire); }

void AmxBf16PanelGemm(const float* x, int64_t ldx, int64_t rows, const uint16_t* panels,
                      int64_t panel_stride, int n, int k, const float* bias, float* y,
                      int64_t ldy) {
#if SLUICE_ENCODER_AVX2
  HardwareTiles tiles;
  amx::AmxBf16Gemm(tiles, x, ldx, rows, panels, panel_stride, n, k, bias, y, ldy);
#else
  (void)x, (void)ldx, (void)rows, (void)panels, (void)panel_stride, (void)n, (void)k, (void)bias,
      (void)y, (void)ldy;
  CHECK(false && "AMX is not built for this CPU architecture");
#endif
}

void AmxInt8PanelGemm(const float* x, int64_t ldx, int64_t rows, const int8_t* panels,
                      int64_t panel_stride, const float* scales, const int32_t* sums, int n, int k,
                      const float* bias, float* y, int64_t ldy) {
#if SLUICE_ENCODER_AVX2
  HardwareTiles tiles;
  amx::AmxInt8Gemm(tiles, x, ldx, rows, panels, panel_stride, scales, sums, n, k, bias, y, ldy);
#else
  (void)x, (void)ldx, (void)rows, (void)panels, (void)panel_stride, (void)scales, (void)sums,
      (void)n, (void)k, (void)bias, (void)y, (void)ldy;
  CHECK(false && "AMX is not built for this CPU architecture");
#endif
}

#if !SLUICE_ENCODER_AVX2
// encoder_gemm_bf16.cc is built on x86-64 only; elsewhere the BF16 product is refused at load
// (Bf16Supported() is false) and these are never called.
Bf16Kernel Bf16For() { return Bf16Kernel::kAvx512Bf16; }
const char* Bf16KernelName(Bf16Kernel kernel) {
  return kernel == Bf16Kernel::kAmx ? "amx" : "avx512-bf16";
}
void Bf16PanelGemm(Bf16Kernel, const float*, int64_t, int64_t, const uint16_t*, int64_t, int, int,
                   const float*, float*, int64_t) {
  CHECK(false && "the BF16 GEMM is not built for this CPU architecture");
}
void ConvertRowsToBf16(const float*, int64_t, int64_t, int, uint16_t*, int64_t) {
  CHECK(false && "the BF16 GEMM is not built for this CPU architecture");
}
void Bf16StoreRows(const float*, int64_t, int, int, const float*, float*, int64_t) {
  CHECK(false && "the BF16 GEMM is not built for this CPU architecture");
}
#endif

const AmxPeaks& AmxPeakRates() {
  static const AmxPeaks peaks = [] {
    AmxPeaks p;
#if SLUICE_ENCODER_AVX2
    if (!Amx().hardware) return p;
    constexpr int64_t kTileIters = 2048, kFmaIters = 8192;
    // Per step: 4 tiles x 16 x 16 dwords x 2 (BF16) or 4 (int8) multiply-adds x 2 operations;
    // 12 x 16 FP32 FMAs x 2.
    const double tile_bf16 = BestSeconds([] { TileChains(kTileIters, false); });
    const double tile_int8 = BestSeconds([] { TileChains(kTileIters, true); });
    const double fma = BestSeconds([] { FmaChains(kFmaIters); });
    p.bf16_flops_per_s = kTileIters * 4.0 * 16 * 16 * 2 * 2 / tile_bf16;
    p.int8_ops_per_s = kTileIters * 4.0 * 16 * 16 * 4 * 2 / tile_int8;
    p.fp32_fma_flops_per_s = kFmaIters * 12.0 * 16 * 2 / fma;
#endif
    return p;
  }();
  return peaks;
}

}  // namespace sluice::engine::models::encoder::gemm
