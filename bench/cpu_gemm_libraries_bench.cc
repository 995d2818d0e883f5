// sluice-cpu-gemm-libraries-bench (issue 36): the encoder's packed GEMM against oneDNN's matmul
// and libxsmm's JIT kernels on the encoder's linear-layer shapes, one thread, weights packed once
// up front, in FP32, BF16 and INT8. Not a test, and no part of the server: it is built only where
// CMake finds oneDNN (`find_package(dnnl)`) and/or libxsmm (pkg-config), e.g. after
// `apt-get install libdnnl-dev libxsmm-dev` on Debian 12 (oneDNN 2.6.3, libxsmm 1.17);
// docs/performance.md records its tables and the decision they support.
//
// Every side computes Y[M, N] = X[M, K] W^T with W [N, K] (nn.Linear's layout) prepared once, as
// the encoder prepares its weights at load, and is timed by CPU time (one thread: its CPU time is
// its compute time, so a shared machine's load moves the figures little). The sides run in turn
// per shape, `--rounds` times, and each cell is the median of its rounds.
//
//   sluice   PackedGemm on PackedWeights::Pack(w, n, k, kFp32 | kBf16 | kInt8): what the encoder
//            runs (encoder_gemm.h); BF16 and INT8 convert / quantize X inside the call.
//   onednn   a matmul primitive created once per shape, its weights declared `format_tag::any`
//            and reordered once into the layout it picks (the packed-weights path). bf16: src
//            bf16, weights bf16, dst f32; each call first reorders X f32 -> bf16 (a reorder
//            primitive created once), counted. int8: src u8 with a run-time zero point, weights
//            s8 quantized per output column as sluice quantizes them, dst f32 through run-time
//            per-column output scales; each call first quantizes X per tensor (its min and max,
//            here, then a reorder f32 -> u8 with run-time scale and zero point), counted. oneDNN
//            2.6's matmul takes one source scale per tensor, not sluice's one per row, and with
//            run-time scales it runs `gemm:jit`, not its brgemm kernels; so int8 also runs
//            "onednn-static": s8 X with a scale fixed at creation (static quantization, which
//            an encoder's varying inputs would need calibrated), brgemm (see DnnlSide).
//   libxsmm  its JIT small-GEMM kernels (libxsmm_smmdispatch, libxsmm_bsmmdispatch) on blocks:
//            W pre-transposed once into contiguous blocks of 64 output columns (bf16: in the VNNI
//            pair layout its BF16 kernels read), each call a loop of one dispatched kernel per
//            64 x 64 block of Y (fewer rows where M < 64), whole K; bf16 converts X with
//            libxsmm_rne_convert_fp32_bf16, counted. libxsmm is a kernel library, not a GEMM:
//            the blocking is this file's, as it would be ours. INT8 is not run on libxsmm (its
//            int8 kernels give int32; the zero point and scales would be this file's code).
//
// "hot" reuses one prepared W; "cold" cycles through --cold-mib of copies of it (96 by default,
// as sluice-encoder-bench's; more than the last-level cache, which on this project's Emerald
// Rapids VM is 260 MiB: --cold-mib 512 there), as the encoder meets its weights (a layer's were
// last read a whole forward pass before); cold is not run at M = 4096, where each weight is
// reused 4096 times. Each side's result is checked against FP64 on the first round (max |error|
// / max |Y|, printed).
//
//   build/bench/sluice-cpu-gemm-libraries-bench --rounds 3 --seconds 0.15 --cold-mib 512

#include <omp.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "CLI/CLI.hpp"
#include "engine/models/encoder/encoder_gemm.h"

#ifdef SLUICE_HAVE_DNNL
#include "oneapi/dnnl/dnnl.hpp"
#endif
#ifdef SLUICE_HAVE_LIBXSMM
#include <libxsmm.h>
#endif

namespace sluice::bench {
namespace {

using engine::models::encoder::PackedWeights;
using engine::models::encoder::WeightFormat;

double CpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

struct Shape {
  const char* model;
  const char* gemm;
  int n;
  int k;
};

// One side's prepared state for one shape and precision: `run(copy)` computes Y from X with the
// copy'th prepared W (copy 0 for hot; 0 .. copies - 1 in turn for cold).
struct Side {
  std::string name;
  int copies = 1;
  std::function<void(int copy)> run;
  std::string info;  // the implementation in use, where the library says
};

// Bytes of weight copies a "cold" side cycles through (--cold-mib).
int64_t cold_bytes = int64_t{96} << 20;

// How many copies of `bytes` of weights fill cold_bytes.
int ColdCopies(int64_t bytes) { return static_cast<int>(cold_bytes / bytes + 1); }

// One-thread rate (G multiply-adds x 2 per s) by CPU time of `side`, hot (copy 0) or cold
// (copies in turn), after one warm-up call, for at least `seconds` of CPU time.
double Rate(Side& side, bool cold, double flops, double seconds) {
  int next = 0;
  auto call = [&] {
    side.run(cold ? next : 0);
    next = (next + 1) % side.copies;
  };
  call();
  int runs = 0;
  const double start = CpuSeconds();
  double elapsed = 0;
  do {
    call();
    ++runs;
    elapsed = CpuSeconds() - start;
  } while (elapsed < seconds);
  return flops * runs / elapsed / 1e9;
}

// max |y - ref| / max |ref|.
double RelativeError(const std::vector<float>& y, const std::vector<double>& ref) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(y[i]) - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return err / scale;
}

// Per output row j of w [n, k]: s8 values round(w / scale_j), scale_j = max |w_j| / 127 (as
// PackedWeights::Pack(kInt8) quantizes them).
void QuantizeRows(const std::vector<float>& w, int n, int k, std::vector<int8_t>* q,
                  std::vector<float>* scales) {
  q->resize(w.size());
  scales->resize(n);
  for (int j = 0; j < n; ++j) {
    float max_abs = 0;
    for (int p = 0; p < k; ++p) max_abs = std::max(max_abs, std::abs(w[int64_t{j} * k + p]));
    const float scale = max_abs > 0 ? max_abs / 127.0f : 1.0f;
    (*scales)[j] = scale;
    for (int p = 0; p < k; ++p) {
      (*q)[int64_t{j} * k + p] = static_cast<int8_t>(std::nearbyint(w[int64_t{j} * k + p] / scale));
    }
  }
}

// Operands shared by every side of one shape and precision.
struct Problem {
  int m, n, k;
  WeightFormat format;
  const std::vector<float>* x;
  const std::vector<float>* w;
  std::vector<float>* y;
};

Side SluiceSide(const Problem& p, bool cold) {
  const int64_t bytes = PackedWeights::Pack(*p.w, p.n, p.k, p.format).bytes();
  const int copies = cold ? ColdCopies(bytes) : 1;
  auto packed = std::make_shared<std::vector<PackedWeights>>();
  for (int i = 0; i < copies; ++i) packed->push_back(PackedWeights::Pack(*p.w, p.n, p.k, p.format));
  Side side{"sluice", copies, nullptr, ""};
  side.info =
      p.format == WeightFormat::kInt8
          ? engine::models::encoder::gemm::Int8KernelName(
                engine::models::encoder::gemm::Int8For(engine::models::encoder::gemm::Get()))
      : p.format == WeightFormat::kBf16 ? "avx512-bf16"
                                        : engine::models::encoder::gemm::Get().name;
  side.run = [p, packed](int copy) {
    engine::models::encoder::PackedGemm(p.x->data(), p.m, (*packed)[copy], nullptr, p.y->data());
  };
  return side;
}

#ifdef SLUICE_HAVE_DNNL
// `static_int8` (int8 only): X quantized to s8 with one scale fixed when the primitive is created
// (max |X| / 127 of this X, as a calibration would fix it; no zero point) and the output scales
// constant: static quantization, the only int8 form oneDNN 2.6 runs on its brgemm kernels here
// (run-time scales or zero points fall back to its `gemm:jit`). Otherwise u8 with a run-time
// scale and zero point per call, dynamic as sluice's (per tensor where sluice's is per row).
Side DnnlSide(const Problem& p, bool cold, bool static_int8 = false) {
  using dnnl::memory;
  using dt = memory::data_type;
  using tag = memory::format_tag;
  struct State {
    dnnl::engine eng{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{eng};
    dnnl::matmul matmul;
    std::vector<memory> weights;
    memory src, dst, x_user, scales, zero_point, quantize_scale;
    std::unique_ptr<dnnl::reorder> to_src;  // bf16, int8: X f32 -> the source type
    std::vector<float> w_scales;
  };
  auto s = std::make_shared<State>();
  const memory::dim m = p.m, n = p.n, k = p.k;
  const bool bf16 = p.format == WeightFormat::kBf16;
  const bool int8 = p.format == WeightFormat::kInt8;
  const bool dynamic_int8 = int8 && !static_int8;
  const dt src_type = bf16 ? dt::bf16 : !int8 ? dt::f32 : static_int8 ? dt::s8 : dt::u8;
  const dt wei_type = bf16 ? dt::bf16 : int8 ? dt::s8 : dt::f32;
  const memory::desc src_md({m, k}, src_type, tag::ab);
  const memory::desc dst_md({m, n}, dt::f32, tag::ab);
  // W [n, k] row-major is the {k, n} weights tensor in `ba`; reordered once per copy.
  std::vector<int8_t> q;
  if (int8) QuantizeRows(*p.w, p.n, p.k, &q, &s->w_scales);
  float x_scale = 1;  // static_int8's fixed scale
  dnnl::primitive_attr attr, quantize;
  if (static_int8) {
    float max_abs = 0;
    for (const float v : *p.x) max_abs = std::max(max_abs, std::abs(v));
    x_scale = max_abs > 0 ? max_abs / 127.0f : 1.0f;
    std::vector<float> out_scales(s->w_scales);
    for (float& v : out_scales) v *= x_scale;
    attr.set_output_scales(1 << 1, out_scales);
    quantize.set_output_scales(0, {1.0f / x_scale});
  } else if (int8) {
    attr.set_output_scales(1 << 1, {DNNL_RUNTIME_F32_VAL});
    attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    quantize.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
    quantize.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
  }
  const dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(src_md, memory::desc({k, n}, wei_type, tag::any), dst_md), attr, s->eng);
  s->matmul = dnnl::matmul(pd);
  const memory::desc user_w_md({k, n}, int8 ? dt::s8 : dt::f32, tag::ba);
  memory user_w(user_w_md, s->eng,
                int8 ? static_cast<void*>(q.data()) : const_cast<float*>(p.w->data()));
  const int copies = cold ? ColdCopies(static_cast<int64_t>(pd.weights_desc().get_size())) : 1;
  for (int i = 0; i < copies; ++i) {
    s->weights.emplace_back(pd.weights_desc(), s->eng);
    dnnl::reorder(user_w, s->weights.back()).execute(s->stream, user_w, s->weights.back());
  }
  s->x_user = memory({{m, k}, dt::f32, tag::ab}, s->eng, const_cast<float*>(p.x->data()));
  s->dst = memory(dst_md, s->eng, p.y->data());
  s->src = src_type == dt::f32 ? s->x_user : memory(src_md, s->eng);
  if (src_type != dt::f32) {
    s->to_src = std::make_unique<dnnl::reorder>(
        dnnl::reorder::primitive_desc(s->eng, s->x_user.get_desc(), s->eng, src_md, quantize));
  }
  if (dynamic_int8) {
    s->scales = memory({{n}, dt::f32, tag::a}, s->eng);
    s->zero_point = memory({{1}, dt::s32, tag::a}, s->eng);
    s->quantize_scale = memory({{1}, dt::f32, tag::a}, s->eng);
  }
  Side side{static_int8 ? "onednn-static" : "onednn", copies, nullptr, pd.impl_info_str()};
  side.run = [s, p, dynamic_int8, n](int copy) {
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, s->src}, {DNNL_ARG_WEIGHTS, s->weights[copy]}, {DNNL_ARG_DST, s->dst}};
    std::unordered_map<int, memory> quantize_args = {{DNNL_ARG_FROM, s->x_user},
                                                     {DNNL_ARG_TO, s->src}};
    if (dynamic_int8) {
      // X per tensor to u8: scale = its range (widened to hold 0) / 255, zero point
      // round(-min / scale); the matmul's output scale per column is scale * w_scale[j].
      const float* x = p.x->data();
      float lo = 0, hi = 0;
      for (int64_t i = 0; i < int64_t{p.m} * p.k; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
      }
      const float scale = hi > lo ? (hi - lo) / 255.0f : 1.0f;
      *static_cast<float*>(s->quantize_scale.get_data_handle()) = 1.0f / scale;
      *static_cast<int32_t*>(s->zero_point.get_data_handle()) =
          static_cast<int32_t>(std::nearbyint(-lo / scale));
      float* out_scales = static_cast<float*>(s->scales.get_data_handle());
      for (int64_t j = 0; j < n; ++j) out_scales[j] = scale * s->w_scales[j];
      quantize_args[DNNL_ARG_ATTR_OUTPUT_SCALES] = s->quantize_scale;
      quantize_args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST] = s->zero_point;
      args[DNNL_ARG_ATTR_OUTPUT_SCALES] = s->scales;
      args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = s->zero_point;
    }
    if (s->to_src != nullptr) s->to_src->execute(s->stream, quantize_args);
    s->matmul.execute(s->stream, args);
    s->stream.wait();
  };
  return side;
}
#endif

#ifdef SLUICE_HAVE_LIBXSMM
// Columns of Y per prepared block of W, and rows of Y per kernel call.
constexpr int kXsmmColumns = 64;
constexpr int kXsmmRows = 64;

Side XsmmSide(const Problem& p, bool cold) {
  const bool bf16 = p.format == WeightFormat::kBf16;
  const int rows = std::min(p.m, kXsmmRows);
  const int blocks = p.n / kXsmmColumns;  // REQUIRES n % 64 == 0 (every encoder shape here)
  // Column-major for libxsmm: C (64 x rows, ldc = n) is a block of Y; B (k x rows, ldb = k) is
  // rows of X; A (64 x k, lda = 64) is W's 64 rows transposed, contiguous per block (bf16: pairs
  // of k interleaved, A[k / 2][64][2], the VNNI layout).
  const libxsmm_blasint m_ = kXsmmColumns, n_ = rows, k_ = p.k, lda = kXsmmColumns, ldb = p.k,
                        ldc = p.n;
  const float alpha = 1, beta = 0;
  const int flags = bf16 ? LIBXSMM_GEMM_FLAG_VNNI_A : 0;
  struct State {
    libxsmm_smmfunction f32 = nullptr;
    libxsmm_bsmmfunction b16 = nullptr;
    std::vector<std::vector<float>> w32;
    std::vector<std::vector<libxsmm_bfloat16>> w16;
    std::vector<libxsmm_bfloat16> x16;
  };
  auto s = std::make_shared<State>();
  if (bf16) {
    s->b16 = libxsmm_bsmmdispatch(m_, n_, k_, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
  } else {
    s->f32 = libxsmm_smmdispatch(m_, n_, k_, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
  }
  if (s->f32 == nullptr && s->b16 == nullptr) return Side{"libxsmm", 0, nullptr, "no kernel"};
  const int64_t block = int64_t{kXsmmColumns} * p.k;
  const int64_t bytes = block * blocks * (bf16 ? 2 : 4);
  const int copies = cold ? ColdCopies(bytes) : 1;
  std::vector<float> wt(block * blocks);
  for (int b = 0; b < blocks; ++b) {
    for (int c = 0; c < kXsmmColumns; ++c) {
      for (int q = 0; q < p.k; ++q) {
        const float v = (*p.w)[(int64_t{b} * kXsmmColumns + c) * p.k + q];
        if (bf16) {
          wt[b * block + (q / 2) * 2 * kXsmmColumns + c * 2 + q % 2] = v;
        } else {
          wt[b * block + int64_t{q} * kXsmmColumns + c] = v;
        }
      }
    }
  }
  for (int i = 0; i < copies; ++i) {
    if (bf16) {
      s->w16.emplace_back(wt.size());
      libxsmm_rne_convert_fp32_bf16(wt.data(), s->w16.back().data(),
                                    static_cast<unsigned>(wt.size()));
    } else {
      s->w32.push_back(wt);
    }
  }
  if (bf16) s->x16.resize(static_cast<size_t>(p.m) * p.k);
  Side side{"libxsmm", copies, nullptr, libxsmm_get_target_arch()};
  side.run = [s, p, rows, blocks, block](int copy) {
    const float* x = p.x->data();
    float* y = p.y->data();
    if (s->b16 != nullptr) {
      libxsmm_rne_convert_fp32_bf16(x, s->x16.data(), static_cast<unsigned>(s->x16.size()));
    }
    // Rows in chunks of 256 (X's chunk stays in L2), then W's blocks, then 64-row tiles.
    for (int r0 = 0; r0 < p.m; r0 += 256) {
      const int r1 = std::min(p.m, r0 + 256);
      for (int b = 0; b < blocks; ++b) {
        for (int r = r0; r < r1; r += rows) {
          float* c = y + int64_t{r} * p.n + int64_t{b} * kXsmmColumns;
          if (s->b16 != nullptr) {
            s->b16(s->w16[copy].data() + b * block, s->x16.data() + int64_t{r} * p.k, c);
          } else {
            s->f32(s->w32[copy].data() + b * block, x + int64_t{r} * p.k, c);
          }
        }
      }
    }
  };
  return side;
}
#endif

const char* FormatName(WeightFormat f) {
  return f == WeightFormat::kFp32 ? "fp32" : f == WeightFormat::kBf16 ? "bf16" : "int8";
}

int Main(int argc, char** argv) {
  CLI::App app{"sluice's packed GEMM vs oneDNN and libxsmm (see the file comment)."};
  int rounds = 3;
  double seconds = 0.2;
  std::vector<int> ms = {16, 128, 4096};
  std::vector<std::string> precisions = {"fp32", "bf16", "int8"};
  std::vector<std::string> models = {"minilm", "bert-base"};
  app.add_option("--rounds", rounds, "alternated rounds; each cell is their median")
      ->capture_default_str();
  app.add_option("--seconds", seconds, "CPU seconds per cell and round")->capture_default_str();
  int cold_mib = 96;
  app.add_option("--cold-mib", cold_mib,
                 "MiB of weight copies a cold side cycles through (more than the last-level "
                 "cache: this project's Emerald Rapids VM reports 260 MiB of L3)")
      ->capture_default_str();
  app.add_option("--m", ms, "rows of X (tokens)")->capture_default_str();
  app.add_option("--precision", precisions, "fp32, bf16, int8")->capture_default_str();
  app.add_option("--model", models, "minilm (H 384, I 1536), bert-base (H 768, I 3072)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  cold_bytes = int64_t{cold_mib} << 20;
  omp_set_num_threads(1);  // oneDNN's Debian build runs on OpenMP: one thread, as sluice's figures
#ifdef SLUICE_HAVE_LIBXSMM
  libxsmm_init();
#endif

  std::vector<Shape> shapes;
  for (const std::string& model : models) {
    const bool base = model == "bert-base";
    const char* label = base ? "BERT-base" : "MiniLM-L6";
    const int h = base ? 768 : 384, i = base ? 3072 : 1536;
    shapes.insert(shapes.end(), {{label, "qkv", 3 * h, h},
                                 {label, "attention_out", h, h},
                                 {label, "intermediate", i, h},
                                 {label, "output", h, i}});
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const std::string& precision : precisions) {
    const WeightFormat format = precision == "bf16"   ? WeightFormat::kBf16
                                : precision == "int8" ? WeightFormat::kInt8
                                                      : WeightFormat::kFp32;
    if (format == WeightFormat::kBf16 && !engine::models::encoder::gemm::Bf16Supported()) {
      std::printf("\n%s: skipped, the CPU lacks AVX512_BF16\n", precision.c_str());
      continue;
    }
    const char* unit = format == WeightFormat::kInt8 ? "GOP/s" : "GFLOP/s";
    std::printf("\n### %s, %s by CPU time (median of %d alternated rounds of %.2f s)\n\n",
                FormatName(format), unit, rounds, seconds);
    // The third side: libxsmm (fp32, bf16) or oneDNN with static quantization (int8).
    const bool int8 = format == WeightFormat::kInt8;
    const std::string third = int8 ? "onednn-static" : "libxsmm";
    const char* third_label = int8 ? "oneDNN static" : "libxsmm";
    std::printf(
        "| model | GEMM | M | N x K | sluice hot | sluice cold | oneDNN hot | oneDNN cold "
        "| %s hot | %s cold | oneDNN / sluice hot | oneDNN / sluice cold "
        "| %s / sluice hot |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        third_label, third_label, third_label);
    std::map<std::string, std::string> infos;
    std::string errors;
    for (const int m : ms) {
      for (const Shape& shape : shapes) {
        std::vector<float> x(static_cast<size_t>(m) * shape.k), w(int64_t{shape.n} * shape.k);
        std::vector<float> y(static_cast<size_t>(m) * shape.n);
        for (float& v : x) v = normal(rng);
        for (float& v : w) v = 0.05f * normal(rng);
        const Problem problem{m, shape.n, shape.k, format, &x, &w, &y};
        const bool cold = m < 4096;
        std::vector<Side> sides;  // hot and cold for each library, in the table's order
        for (const bool c : {false, true}) {
          if (c && !cold) break;
          sides.push_back(SluiceSide(problem, c));
#ifdef SLUICE_HAVE_DNNL
          sides.push_back(DnnlSide(problem, c));
#endif
#ifdef SLUICE_HAVE_LIBXSMM
          if (format != WeightFormat::kInt8) sides.push_back(XsmmSide(problem, c));
#endif
#ifdef SLUICE_HAVE_DNNL
          if (format == WeightFormat::kInt8) sides.push_back(DnnlSide(problem, c, true));
#endif
        }
        // The first round's products checked against FP64 (the quantized sides' own error).
        std::vector<double> ref(y.size());
        for (int i = 0; i < m; ++i) {
          for (int j = 0; j < shape.n; ++j) {
            double sum = 0;
            for (int q = 0; q < shape.k; ++q) {
              sum += double{x[int64_t{i} * shape.k + q]} * w[int64_t{j} * shape.k + q];
            }
            ref[int64_t{i} * shape.n + j] = sum;
          }
          if (m == 4096 && i == 63) break;  // the first 64 rows are enough at 4096
        }
        std::map<std::string, std::vector<double>> rates;
        const double flops = 2.0 * m * shape.n * shape.k;
        for (int round = 0; round < rounds; ++round) {
          for (size_t i = 0; i < sides.size(); ++i) {
            Side& side = sides[i];
            if (side.run == nullptr) continue;
            const bool is_cold = cold && i >= sides.size() / 2;
            if (round == 0 && !is_cold) {
              std::fill(y.begin(), y.end(), 0.0f);
              side.run(0);
              std::vector<float> got(y.begin(), y.begin() + (m == 4096 ? 64 : m) * shape.n);
              std::vector<double> want(ref.begin(), ref.begin() + got.size());
              char line[200];
              std::snprintf(line, sizeof(line), "%s %s %s M=%d: %s error %.1e (%s)\n",
                            FormatName(format), shape.model, shape.gemm, m, side.name.c_str(),
                            RelativeError(got, want), side.info.c_str());
              errors += line;
              infos[side.name] = side.info;
            }
            rates[side.name + (is_cold ? " cold" : " hot")].push_back(
                Rate(side, is_cold, flops, seconds));
          }
        }
        auto med = [&](const std::string& key) {
          auto it = rates.find(key);
          if (it == rates.end() || it->second.empty()) return std::nan("");
          std::vector<double> v = it->second;
          std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
          return v[v.size() / 2];
        };
        auto cell = [](double v) {
          char out[32];
          if (std::isnan(v)) return std::string("-");
          std::snprintf(out, sizeof(out), "%.1f", v);
          return std::string(out);
        };
        auto ratio = [](double a, double b) {
          char out[32];
          if (std::isnan(a) || std::isnan(b)) return std::string("-");
          std::snprintf(out, sizeof(out), "%.2f", a / b);
          return std::string(out);
        };
        std::printf("| %s | %s | %d | %d x %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                    shape.model, shape.gemm, m, shape.n, shape.k, cell(med("sluice hot")).c_str(),
                    cell(med("sluice cold")).c_str(), cell(med("onednn hot")).c_str(),
                    cell(med("onednn cold")).c_str(), cell(med(third + " hot")).c_str(),
                    cell(med(third + " cold")).c_str(),
                    ratio(med("onednn hot"), med("sluice hot")).c_str(),
                    ratio(med("onednn cold"), med("sluice cold")).c_str(),
                    ratio(med(third + " hot"), med("sluice hot")).c_str());
        std::fflush(stdout);
      }
    }
    std::printf("\n%s implementations:", FormatName(format));
    for (const auto& [name, info] : infos) std::printf(" %s = %s;", name.c_str(), info.c_str());
    std::printf("\n\nerrors against FP64 (first round):\n%s", errors.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace sluice::bench

int main(int argc, char** argv) { return sluice::bench::Main(argc, argv); }
