// GPU tests of the encoder's own kernels (kernels/encoder_kernels.cu), each against a plain CPU
// computation of its definition in FP32 on the same inputs: when the end-to-end encoder test
// (cuda_encoder_test.cc) fails on a GPU, these say which kernel. CTest label `gpu`; skipped with
// the reason where no GPU is usable.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/wire/float16.h"
#include "engine/cuda/cuda_handles.h"
#include "engine/cuda/kernels/encoder_kernels.cuh"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_required.h"

namespace sluice::engine::cuda {
namespace {

class EncoderKernelsTest : public ::testing::Test {
 public:
  void SetUp() override {
    SLUICE_SKIP_WITHOUT_GPU();
    auto stream = CudaStream::Create(0);
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_.emplace(*std::move(stream));
  }

  // Device copies of host vectors, freed with the test.
  template <typename T>
  T* Upload(const std::vector<T>& values) {
    auto buffer = DeviceBuffer::Create(0, std::max<size_t>(values.size(), 1) * sizeof(T));
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    if (!values.empty()) {
      // On the kernels' own stream, then waited for: a plain cudaMemcpy runs on the legacy
      // default stream, which a non-blocking stream (CudaStream's) does not wait for, and from
      // pageable memory it may return before the data has reached the device.
      EXPECT_EQ(cudaMemcpyAsync(buffer->get(), values.data(), values.size() * sizeof(T),
                                cudaMemcpyHostToDevice, stream()),
                cudaSuccess);
      EXPECT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
    }
    buffers_.push_back(*std::move(buffer));
    return static_cast<T*>(buffers_.back().get());
  }
  template <typename T>
  std::vector<T> Download(const T* device, size_t count) {
    EXPECT_EQ(cudaStreamSynchronize(stream_->get()), cudaSuccess);
    std::vector<T> values(count);
    EXPECT_EQ(cudaMemcpy(values.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return values;
  }
  cudaStream_t stream() const { return stream_->get(); }

 private:
  std::optional<CudaStream> stream_;
  std::vector<DeviceBuffer> buffers_;
};

std::vector<float> Random(size_t count, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<float> values(count);
  for (float& v : values) v = normal(rng);
  return values;
}

// A 16-bit element type's bits for `value` (round to nearest), and back.
uint16_t Narrow(float value, ElementType type) {
  return type == ElementType::kFp16 ? wire::FloatToHalf(value) : wire::FloatToBFloat16(value);
}
float Widen(uint16_t bits, ElementType type) {
  return type == ElementType::kFp16 ? wire::HalfToFloat(bits) : wire::BFloat16ToFloat(bits);
}

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  return diff;
}

// A packed batch: sequences of `lengths` (some empty at the end, as padding sequences), in a
// bucket of `max_sequences` x `max_tokens`; every 5th token of a sequence longer than 4 masked.
struct Packed {
  std::vector<int32_t> counts;
  std::vector<int32_t> cu;
  std::vector<int32_t> ids, types, positions, attend;
  int max_sequences = 0;
  int max_tokens = 0;
};

Packed Pack(const std::vector<int>& lengths, int max_sequences, int max_tokens, int vocab) {
  Packed p;
  p.max_sequences = max_sequences;
  p.max_tokens = max_tokens;
  p.cu.push_back(0);
  int tokens = 0;
  std::mt19937 rng(3);
  for (int length : lengths) {
    for (int c = 0; c < length; ++c) {
      p.ids.push_back(static_cast<int32_t>(rng() % vocab));
      p.types.push_back(c % 2);
      p.positions.push_back(c);
      p.attend.push_back(length > 4 && c % 5 == 2 ? 0 : 1);
    }
    tokens += length;
    p.cu.push_back(tokens);
  }
  while (static_cast<int>(p.cu.size()) < max_sequences + 1) p.cu.push_back(tokens);
  p.counts = {static_cast<int32_t>(lengths.size()), tokens};
  p.ids.resize(max_tokens, 0);
  p.types.resize(max_tokens, 0);
  p.positions.resize(max_tokens, 0);
  p.attend.resize(max_tokens, 0);
  return p;
}

EncoderBatchView View(EncoderKernelsTest& test, const Packed& p) {
  return {.counts = test.Upload(p.counts),
          .cu_seqlens = test.Upload(p.cu),
          .token_ids = test.Upload(p.ids),
          .token_types = test.Upload(p.types),
          .positions = test.Upload(p.positions),
          .attend = test.Upload(p.attend),
          .max_sequences = p.max_sequences,
          .max_tokens = p.max_tokens};
}

// Every head size in each element type: the 16-bit kernels read and write FP16/BF16 (the
// reference runs on the same rounded inputs; the tolerance is the output's rounding).
TEST_F(EncoderKernelsTest, VarlenAttentionMatchesASoftmaxPerSequenceAndHead) {
  const std::vector<int> lengths = {1, 17, 40, 5, 33};
  for (ElementType type : {ElementType::kFp32, ElementType::kFp16, ElementType::kBf16}) {
    for (int d : {16, 32, 64, 128}) {
      const char* type_name = type == ElementType::kFp32   ? "FP32"
                              : type == ElementType::kFp16 ? "FP16"
                                                           : "BF16";
      SCOPED_TRACE(absl::StrCat(type_name, ", head size ", d));
      const int heads = 3;
      const int hidden = heads * d;
      const Packed p = Pack(lengths, 8, 128, 10);
      const EncoderBatchView view = View(*this, p);
      std::vector<float> qkv = Random(static_cast<size_t>(p.max_tokens) * 3 * hidden, d);
      const size_t context_size = static_cast<size_t>(p.max_tokens) * hidden;
      std::vector<float> got;
      if (type == ElementType::kFp32) {
        float* context = Upload(std::vector<float>(context_size, -7.f));
        ASSERT_TRUE(
            LaunchVarlenAttention(Upload(qkv), view, heads, d, 64, type, context, stream()).ok());
        got = Download(context, context_size);
      } else {
        std::vector<uint16_t> bits(qkv.size());
        for (size_t i = 0; i < qkv.size(); ++i) {
          bits[i] = Narrow(qkv[i], type);
          qkv[i] = Widen(bits[i], type);  // the reference sees the rounded inputs
        }
        uint16_t* context = Upload(std::vector<uint16_t>(context_size, Narrow(-7.f, type)));
        ASSERT_TRUE(
            LaunchVarlenAttention(Upload(bits), view, heads, d, 64, type, context, stream()).ok());
        for (uint16_t b : Download(context, context_size)) got.push_back(Widen(b, type));
      }
      std::vector<float> want(got.size(), -7.f);  // rows past the real tokens untouched
      const float scale = 1.f / std::sqrt(static_cast<float>(d));
      for (size_t s = 0; s + 1 < p.cu.size(); ++s) {
        const int begin = p.cu[s];
        const int n = p.cu[s + 1] - begin;
        for (int h = 0; h < heads; ++h) {
          for (int i = 0; i < n; ++i) {
            std::vector<double> weights(n, 0.0);
            double top = -1e300;
            for (int j = 0; j < n; ++j) {
              if (!p.attend[begin + j]) continue;
              double dot = 0;
              for (int c = 0; c < d; ++c) {
                dot += double{qkv[(begin + i) * 3 * hidden + h * d + c]} *
                       qkv[(begin + j) * 3 * hidden + hidden + h * d + c];
              }
              weights[j] = dot * scale;
              top = std::max(top, weights[j]);
            }
            double sum = 0;
            for (int j = 0; j < n; ++j) {
              weights[j] = p.attend[begin + j] ? std::exp(weights[j] - top) : 0.0;
              sum += weights[j];
            }
            for (int c = 0; c < d; ++c) {
              double acc = 0;
              for (int j = 0; j < n; ++j) {
                acc += weights[j] * qkv[(begin + j) * 3 * hidden + 2 * hidden + h * d + c];
              }
              want[(begin + i) * hidden + h * d + c] = static_cast<float>(acc / sum);
            }
          }
        }
      }
      double largest = 0;
      for (float v : want) largest = std::max(largest, std::abs(double{v}));
      // FP32: sums reordered; FP16 / BF16: the stored output's rounding (half an ulp: at most
      // 2^-11 / 2^-8 of the largest value), twice over for the FP32 arithmetic before it.
      const double tolerance = type == ElementType::kFp32   ? 1e-5
                               : type == ElementType::kFp16 ? 1e-3 * largest
                                                            : 8e-3 * largest;
      EXPECT_LE(MaxDiff(got, want), tolerance);
    }
  }
}

// 96: one element per thread; 1000 (not a multiple of 32): four per thread, as BERT-base's 768
// takes three.
TEST_F(EncoderKernelsTest, LayerNormKernelsMatchTheirDefinition) {
  for (int hidden : {96, 1000}) {
    SCOPED_TRACE(absl::StrCat("hidden ", hidden));
    const int vocab = 10;
    const Packed p = Pack({3, 7}, 4, 16, vocab);
    const EncoderBatchView view = View(*this, p);
    const std::vector<float> word = Random(vocab * hidden, 1);
    const std::vector<float> position = Random(16 * hidden, 2);
    const std::vector<float> type = Random(2 * hidden, 3);
    const std::vector<float> gamma = Random(hidden, 4, 0.1f);
    const std::vector<float> beta = Random(hidden, 5, 0.1f);
    float* out = Upload(std::vector<float>(16 * hidden));
    const EmbeddingTables tables{.word = Upload(word),
                                 .position = Upload(position),
                                 .type = Upload(type),
                                 .gamma = Upload(gamma),
                                 .beta = Upload(beta),
                                 .vocab = vocab,
                                 .positions = 16,
                                 .types = 2};
    const float eps = 1e-5f;
    ASSERT_TRUE(
        LaunchEmbeddingLayerNorm(view, tables, eps, hidden, ElementType::kFp32, out, stream())
            .ok());
    auto layer_norm = [&](std::vector<double> row) {
      double mean = 0;
      for (double v : row) mean += v;
      mean /= hidden;
      double var = 0;
      for (double v : row) var += (v - mean) * (v - mean);
      var /= hidden;
      std::vector<float> result(hidden);
      for (int j = 0; j < hidden; ++j) {
        result[j] = static_cast<float>((row[j] - mean) / std::sqrt(var + eps) * gamma[j] + beta[j]);
      }
      return result;
    };
    std::vector<float> want;
    for (int t = 0; t < 16; ++t) {
      std::vector<double> row(hidden);
      for (int j = 0; j < hidden; ++j) {
        row[j] = double{word[p.ids[t] * hidden + j]} + type[p.types[t] * hidden + j] +
                 position[p.positions[t] * hidden + j];
      }
      for (float v : layer_norm(row)) want.push_back(v);
    }
    const std::vector<float> embedded = Download(out, 16 * hidden);
    EXPECT_LE(MaxDiff(embedded, want), 1e-5);

    // x = LayerNorm(projected + bias + x), in place.
    const std::vector<float> projected = Random(16 * hidden, 6);
    const std::vector<float> bias = Random(hidden, 7, 0.1f);
    ASSERT_TRUE(LaunchBiasResidualLayerNorm(Upload(projected), Upload(bias), out, Upload(gamma),
                                            Upload(beta), eps, 16, hidden, ElementType::kFp32,
                                            stream())
                    .ok());
    want.clear();
    for (int t = 0; t < 16; ++t) {
      std::vector<double> row(hidden);
      for (int j = 0; j < hidden; ++j) {
        row[j] = double{projected[t * hidden + j]} + bias[j] + embedded[t * hidden + j];
      }
      for (float v : layer_norm(row)) want.push_back(v);
    }
    EXPECT_LE(MaxDiff(Download(out, 16 * hidden), want), 1e-5);
  }
}

TEST_F(EncoderKernelsTest, PoolingFirstTokensAndSmallLinearMatchTheirDefinition) {
  // 40: one column per thread; 300: two for some threads.
  for (int hidden : {40, 300}) {
    SCOPED_TRACE(absl::StrCat("hidden ", hidden));
    const Packed p = Pack({6, 1, 12}, 5, 32, 10);  // two padding sequences at the end
    const EncoderBatchView view = View(*this, p);
    const std::vector<float> states = Random(32 * hidden, 8);
    const float* states_device = Upload(states);
    const PoolingFlags pooling{
        .cls = true, .max = true, .mean = true, .mean_sqrt_len = true, .normalize = true};
    float* pooled = Upload(std::vector<float>(5 * 4 * hidden, -3.f));
    ASSERT_TRUE(LaunchPoolEmbedding(states_device, view, hidden, pooling, ElementType::kFp32,
                                    pooled, stream())
                    .ok());
    std::vector<float> want(5 * 4 * hidden, 0.f);
    for (int s = 0; s < 5; ++s) {
      const int begin = p.cu[s];
      const int end = p.cu[s + 1];
      if (end == begin) continue;  // padding sequences: zeros
      double count = 0;
      std::vector<double> sum(hidden, 0), top(hidden, -1e9);
      for (int t = begin; t < end; ++t) {
        if (!p.attend[t]) continue;
        count += 1;
        for (int j = 0; j < hidden; ++j) {
          sum[j] += states[t * hidden + j];
          top[j] = std::max(top[j], double{states[t * hidden + j]});
        }
      }
      std::vector<double> row;
      for (int j = 0; j < hidden; ++j) row.push_back(states[begin * hidden + j]);
      for (int j = 0; j < hidden; ++j) row.push_back(top[j]);
      for (int j = 0; j < hidden; ++j) row.push_back(sum[j] / count);
      for (int j = 0; j < hidden; ++j) row.push_back(sum[j] / std::sqrt(count));
      double norm = 0;
      for (double v : row) norm += v * v;
      norm = std::max(std::sqrt(norm), 1e-12);
      for (size_t k = 0; k < row.size(); ++k)
        want[s * 4 * hidden + k] = static_cast<float>(row[k] / norm);
    }
    EXPECT_LE(MaxDiff(Download(pooled, want.size()), want), 1e-5);

    float* first = Upload(std::vector<float>(5 * hidden, -3.f));
    ASSERT_TRUE(
        LaunchGatherFirstTokens(states_device, view, hidden, ElementType::kFp32, first, stream())
            .ok());
    std::vector<float> want_first(5 * hidden, 0.f);
    for (int s = 0; s < 3; ++s) {
      for (int j = 0; j < hidden; ++j) want_first[s * hidden + j] = states[p.cu[s] * hidden + j];
    }
    EXPECT_EQ(Download(first, want_first.size()), want_first);

    // y = x W^T (3 labels, 40 in) and then the head epilogue: tanh(y + b) in FP32.
    const std::vector<float> w = Random(3 * hidden, 9);
    const std::vector<float> b = Random(3, 10);
    float* y = Upload(std::vector<float>(5 * 3));
    float* z = Upload(std::vector<float>(5 * 3));
    ASSERT_TRUE(
        LaunchSmallLinear(first, Upload(w), 5, hidden, 3, ElementType::kFp32, y, stream()).ok());
    ASSERT_TRUE(LaunchHeadEpilogue(y, Upload(b), 5, 3, DeviceActivation::kTanh, ElementType::kFp32,
                                   z, nullptr, stream())
                    .ok());
    std::vector<float> want_z(5 * 3);
    for (int r = 0; r < 5; ++r) {
      for (int o = 0; o < 3; ++o) {
        double acc = 0;
        for (int k = 0; k < hidden; ++k)
          acc += double{want_first[r * hidden + k]} * w[o * hidden + k];
        want_z[r * 3 + o] = static_cast<float>(std::tanh(acc + b[o]));
      }
    }
    // A dot product of `hidden` FP32 terms (per-lane sums, then the warp's tree) before the tanh.
    EXPECT_LE(MaxDiff(Download(z, want_z.size()), want_z), hidden <= 40 ? 1e-5 : 5e-5);
  }
}

}  // namespace
}  // namespace sluice::engine::cuda
