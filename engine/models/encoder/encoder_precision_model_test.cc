// The encoder's `precision` parameter (encoder_precision.h) through the model API on a tiny
// checkpoint: bf16 packs the layers' weights in BF16 (half the bytes), names itself in the load
// summary and answers close to fp32; unknown values fail the load. The accuracy on the real
// all-MiniLM-L6-v2 against sentence-transformers is tests/integration/encoder_precision_test.py.

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/core/backend.h"
#include "engine/engine.h"
#include "engine/models/encoder/encoder_gemm.h"
#include "engine/models/encoder/encoder_model.h"
#include "engine/models/encoder/encoder_network.h"
#include "engine/models/encoder/encoder_precision.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/engine/encoder_checkpoint.h"

namespace sluice::engine::models {
namespace {

using namespace test_support;  // NOLINT: the shared checkpoints and fixture
using ::testing::HasSubstr;

double Cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += double{a[i]} * b[i];
    na += double{a[i]} * a[i];
    nb += double{b[i]} * b[i];
  }
  return dot / std::sqrt(na * nb);
}

// Issue 31: a checkpoint stored in BF16 or FP16 is held in its 16 bits (the linear layers and the
// word embeddings: half the FP32 bytes), and answers as the same checkpoint widened to FP32 at
// load does, to the bit.
TEST_F(EncoderModelTest, ASixteenBitCheckpointIsHeldSoAndAnswersAsItsFp32Widening) {
  for (DataType dtype : {DataType::kBf16, DataType::kFp16}) {
    const bool bf16 = dtype == DataType::kBf16;
    const std::string folder = Write(TinyBert(), bf16 ? "b" : "h", dtype);
    const encoder::WeightFormat held_format =
        bf16 ? encoder::WeightFormat::kFp32HeldBf16 : encoder::WeightFormat::kFp32HeldFp16;
    auto held = CreateEncoderModel(Spec(folder));
    ASSERT_TRUE(held.ok()) << held.status();
    ::setenv("SLUICE_ENCODER_WIDEN_WEIGHTS", "1", 1);
    auto wide = CreateEncoderModel(Spec(folder));
    ::unsetenv("SLUICE_ENCODER_WIDEN_WEIGHTS");
    ASSERT_TRUE(wide.ok()) << wide.status();
    const auto held_net = LoadedEncoderNetwork(**held);
    const auto wide_net = LoadedEncoderNetwork(**wide);
    EXPECT_EQ(held_net->word_embeddings.format(), held_format);
    EXPECT_EQ(wide_net->word_embeddings.format(), encoder::WeightFormat::kFp32);
    EXPECT_EQ(2 * held_net->word_embeddings.bytes(), wide_net->word_embeddings.bytes());
    for (int l = 0; l < 2; ++l) {
      const encoder::EncoderLayer& h = held_net->encoder_layers[l];
      const encoder::EncoderLayer& w = wide_net->encoder_layers[l];
      using Weights = const encoder::PackedWeights*;
      for (const auto& [held_w, wide_w] :
           {std::pair<Weights, Weights>{&h.qkv_weight, &w.qkv_weight},
            {&h.attention_out_weight, &w.attention_out_weight},
            {&h.intermediate_weight, &w.intermediate_weight},
            {&h.output_weight, &w.output_weight}}) {
        EXPECT_EQ(held_w->format(), held_format) << "layer " << l;
        EXPECT_EQ(wide_w->format(), encoder::WeightFormat::kFp32) << "layer " << l;
        // (One 16-column panel here, held with a zero partner: the same bytes; half at scale.)
        EXPECT_LE(held_w->bytes(), wide_w->bytes()) << "layer " << l;
        EXPECT_EQ(held_w->Unpack(), wide_w->Unpack()) << "layer " << l;
      }
    }
    Input in;
    in.Add("input_ids", {3, 5}, {2, 7, 3, 9, 4, 5, 6, 11, 12, 3, 1, 19, 8, 0, 0});
    auto held_out = (*(*held)->CreateInstance(0))->Run(in.views);
    auto wide_out = (*(*wide)->CreateInstance(0))->Run(in.views);
    ASSERT_TRUE(held_out.ok() && wide_out.ok());
    ASSERT_EQ(held_out->size(), wide_out->size());
    for (size_t i = 0; i < held_out->size(); ++i) {
      EXPECT_EQ(Floats((*held_out)[i]), Floats((*wide_out)[i]))
          << (bf16 ? "bf16 " : "fp16 ") << (*held_out)[i].name;
    }
  }
}

TEST_F(EncoderModelTest, PrecisionParameterChoosesTheWeightFormat) {
  const std::string folder = Write(TinyBert());
  ModelConfig bad;
  bad.parameters["precision"] = "fp16";
  EXPECT_THAT(CreateEncoderModel(Spec(folder, bad)).status().message(),
              HasSubstr("parameter 'precision' = 'fp16' must be one of fp32, bf16, int8, auto"));
  EXPECT_THAT(CompleteEncoderConfig(Spec(folder, bad)).status().message(),
              HasSubstr("'precision' = 'fp16'"));

  auto fp32 = CreateEncoderModel(Spec(folder));
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  EXPECT_EQ((*fp32)->LoadSummary(), "CPU precision fp32 (the default)");
  const auto fp32_net = LoadedEncoderNetwork(**fp32);
  EXPECT_EQ(fp32_net->weight_format, encoder::WeightFormat::kFp32);

  // bf16 in the arithmetic this CPU chooses, then in each forced one it has (SLUICE_ENCODER_BF16):
  // BF16 weights either way; BF16 dot products only where AVX512_BF16 outruns FP32 FMA.
  const bool dot_chosen =
      encoder::gemm::Bf16Supported() && encoder::gemm::Bf16Speedup() >= encoder::kBf16DotMinSpeedup;
  for (const char* forced : {"", "widen", "dot"}) {
    SCOPED_TRACE(std::string("SLUICE_ENCODER_BF16=") + forced);
    const bool dot = std::string_view(forced) == "dot" || (*forced == '\0' && dot_chosen);
    if (dot && !encoder::gemm::Bf16Supported()) continue;  // a load error: the unit test's
    setenv(encoder::kBf16ArithmeticEnv, forced, 1);
    ModelConfig config;
    config.parameters["precision"] = "bf16";
    auto bf16 = CreateEncoderModel(Spec(folder, config));
    unsetenv(encoder::kBf16ArithmeticEnv);
    ASSERT_TRUE(bf16.ok()) << bf16.status();
    EXPECT_THAT((*bf16)->LoadSummary(), HasSubstr(dot ? "CPU precision bf16 (from its config: "
                                                        "BF16 weights and GEMM inputs"
                                                      : "CPU precision bf16 (from its config: "
                                                        "BF16 weights, widened per panel"));
    const auto bf16_net = LoadedEncoderNetwork(**bf16);
    const encoder::WeightFormat format =
        dot ? encoder::WeightFormat::kBf16 : encoder::WeightFormat::kFp32HeldBf16;
    ASSERT_EQ(bf16_net->weight_format, format);
    EXPECT_STREQ(encoder::PrecisionName(bf16_net->weight_format), "bf16");
    const encoder::EncoderLayer& layer = bf16_net->encoder_layers[0];
    EXPECT_EQ(layer.qkv_weight.format(), format);
    // Two bytes a value (kFp32HeldBf16 pairs its panels: an odd last one with a zero panel).
    const encoder::PackedWeights& inter = layer.intermediate_weight;
    EXPECT_EQ(inter.bytes(), (dot ? inter.panels() : 2 * inter.held_pairs()) *
                                 inter.panel_stride() * int64_t{sizeof(uint16_t)});
    // The weights are the FP32 ones rounded to BF16.
    const std::vector<float> fp32_w = fp32_net->encoder_layers[0].output_weight.Unpack();
    const std::vector<float> bf16_w = layer.output_weight.Unpack();
    for (size_t i = 0; i < fp32_w.size(); ++i) {
      ASSERT_EQ(bf16_w[i], encoder::Bf16ToFloat(encoder::RoundToBf16(fp32_w[i]))) << i;
    }

    Input in;
    in.Add("input_ids", {2, 5}, {2, 7, 3, 9, 4, 5, 6, 11, 12, 3});
    auto fp32_out = (*(*fp32)->CreateInstance(0))->Run(in.views);
    auto bf16_out = (*(*bf16)->CreateInstance(0))->Run(in.views);
    ASSERT_TRUE(fp32_out.ok() && bf16_out.ok());
    ASSERT_EQ((*bf16_out)[1].name, "embedding");
    const std::vector<float> a = Floats((*fp32_out)[1]);
    const std::vector<float> b = Floats((*bf16_out)[1]);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_NE(a, b);  // the BF16 weights did serve
    const size_t dim = a.size() / 2;
    for (size_t row = 0; row < 2; ++row) {
      const std::vector<float> ra(a.begin() + row * dim, a.begin() + (row + 1) * dim);
      const std::vector<float> rb(b.begin() + row * dim, b.begin() + (row + 1) * dim);
      EXPECT_GT(Cosine(ra, rb), 0.999) << "sequence " << row;
    }
  }

  ModelConfig automatic;
  automatic.parameters["precision"] = "auto";
  auto chosen = CreateEncoderModel(Spec(folder, automatic));
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  if (encoder::gemm::Int8VnniSupported() && encoder::gemm::Int8Speedup() >= 1.2) {
    // int8 first where VNNI outruns FP32 FMA (PrecisionAutoTakesInt8...: the probe's verdict).
    return;
  }
  // bf16 only where this CPU's BF16 dot product outruns its FP32 FMA (not on Intel without AMX).
  const bool faster = encoder::gemm::Bf16Speedup() >= 1.2;
  EXPECT_THAT((*chosen)->LoadSummary(),
              HasSubstr(faster ? "precision bf16 (auto: the CPU has AVX512_BF16"
                               : "precision fp32 (auto: the CPU has AVX512_BF16, but"));
  EXPECT_EQ(LoadedEncoderNetwork(**chosen)->weight_format,
            faster ? encoder::WeightFormat::kBf16 : encoder::WeightFormat::kFp32);
}

TEST_F(EncoderModelTest, PrecisionAutoTakesInt8WhereVnniIsFasterAndTheProbePasses) {
  if (!encoder::gemm::Int8VnniSupported() || encoder::gemm::Int8Speedup() < 1.2) {
    GTEST_SKIP() << "this CPU has no AVX512_VNNI outrunning its FP32 FMA: auto does not try int8";
  }
  const std::string folder = Write(TinyBert());
  ModelConfig automatic;
  automatic.parameters["precision"] = "auto";
  auto chosen = CreateEncoderModel(Spec(folder, automatic));
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  const auto net = LoadedEncoderNetwork(**chosen);
  // The probe decides: int8 kept with its measured cosine, or the fallback saying why not.
  const std::string summary = (*chosen)->LoadSummary();
  if (net->weight_format == encoder::WeightFormat::kInt8) {
    EXPECT_THAT(summary, HasSubstr("CPU precision int8 (auto: the CPU has AVX512_VNNI, its "
                                   "VPDPBUSD peaks at"));
    EXPECT_THAT(summary, HasSubstr("; probe embeddings' cosine to fp32 min 0.9"));
  } else {
    EXPECT_THAT(summary, HasSubstr("; int8 not taken: probe embeddings' cosine to fp32 min"));
  }
  // The probe itself: a network against itself is 1; int8 against fp32 close to it.
  auto fp32 = CreateEncoderModel(Spec(folder));
  ModelConfig int8_config;
  int8_config.parameters["precision"] = "int8";
  auto int8 = CreateEncoderModel(Spec(folder, int8_config));
  ASSERT_TRUE(fp32.ok() && int8.ok());
  const auto fp32_net = LoadedEncoderNetwork(**fp32);
  EXPECT_NEAR(encoder::ProbeMinCosine(*fp32_net, *fp32_net), 1.0, 1e-9);
  EXPECT_GT(encoder::ProbeMinCosine(*fp32_net, *LoadedEncoderNetwork(**int8)), 0.99);
}

TEST_F(EncoderModelTest, PrecisionInt8PacksAQuarterOfTheBytesAndAnswersCloseToFp32) {
  const std::string folder = Write(TinyBert());
  auto fp32 = CreateEncoderModel(Spec(folder));
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  ModelConfig config;
  config.parameters["precision"] = "int8";
  auto int8 = CreateEncoderModel(Spec(folder, config));
  if (!encoder::gemm::Int8VnniSupported()) {
    EXPECT_THAT(int8.status().message(), HasSubstr("needs a CPU with AVX512_VNNI"));
    GTEST_SKIP() << "this CPU has no AVX512_VNNI: the refusal checked, the int8 answers not";
  }
  ASSERT_TRUE(int8.ok()) << int8.status();
  EXPECT_THAT((*int8)->LoadSummary(),
              HasSubstr("CPU precision int8 (from its config: INT8 weights per output channel, "
                        "activations per token, INT32 accumulation; AVX512-VNNI"));
  const auto fp32_net = LoadedEncoderNetwork(**fp32);
  const auto int8_net = LoadedEncoderNetwork(**int8);
  ASSERT_EQ(int8_net->weight_format, encoder::WeightFormat::kInt8);
  const encoder::EncoderLayer& layer = int8_net->encoder_layers[0];
  for (const encoder::PackedWeights* w : {&layer.qkv_weight, &layer.attention_out_weight,
                                          &layer.intermediate_weight, &layer.output_weight}) {
    EXPECT_EQ(w->format(), encoder::WeightFormat::kInt8);
    EXPECT_EQ(w->data(), nullptr);
  }
  // A quarter of the panels' bytes, plus a scale and a sum per column.
  const encoder::PackedWeights& fp32_inter = fp32_net->encoder_layers[0].intermediate_weight;
  EXPECT_EQ(layer.intermediate_weight.bytes(),
            fp32_inter.bytes() / 4 + int64_t{fp32_inter.panels()} * encoder::kPanelWidth * 8);

  Input in;
  in.Add("input_ids", {2, 5}, {2, 7, 3, 9, 4, 5, 6, 11, 12, 3});
  auto fp32_out = (*(*fp32)->CreateInstance(0))->Run(in.views);
  auto int8_out = (*(*int8)->CreateInstance(0))->Run(in.views);
  ASSERT_TRUE(fp32_out.ok() && int8_out.ok());
  const std::vector<float> a = Floats((*fp32_out)[1]);
  const std::vector<float> b = Floats((*int8_out)[1]);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_NE(a, b);  // INT8 did run
  const size_t dim = a.size() / 2;
  for (size_t row = 0; row < 2; ++row) {
    const std::vector<float> ra(a.begin() + row * dim, a.begin() + (row + 1) * dim);
    const std::vector<float> rb(b.begin() + row * dim, b.begin() + (row + 1) * dim);
    EXPECT_GT(Cosine(ra, rb), 0.99) << "sequence " << row;
  }
}

// Issue 36: which precision serves a model is in ModelConfig and a metric label. The model names
// it (ResolvedParameters) from its loaded network, whatever the config said: fp32 when absent,
// the explicit value, and auto's choice, which the load summary gives too.
TEST_F(EncoderModelTest, ResolvedParametersNameThePrecisionThatServes) {
  const std::string folder = Write(TinyBert());
  using Resolved = std::map<std::string, std::string>;
  auto fp32 = CreateEncoderModel(Spec(folder));
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  EXPECT_EQ((*fp32)->ResolvedParameters(), (Resolved{{"precision", "fp32"}}));

  for (const std::string explicit_precision : {"fp32", "bf16", "int8"}) {
    const bool supported = explicit_precision == "fp32" ||
                           (explicit_precision == "bf16" && encoder::gemm::Bf16Supported()) ||
                           (explicit_precision == "int8" && encoder::gemm::Int8VnniSupported());
    if (!supported) continue;  // refused at load (PrecisionParameterChoosesTheWeightFormat)
    ModelConfig config;
    config.parameters["precision"] = explicit_precision;
    auto model = CreateEncoderModel(Spec(folder, config));
    ASSERT_TRUE(model.ok()) << explicit_precision << ": " << model.status();
    EXPECT_EQ((*model)->ResolvedParameters(), (Resolved{{"precision", explicit_precision}}));
  }

  ModelConfig automatic;
  automatic.parameters["precision"] = "auto";
  auto chosen = CreateEncoderModel(Spec(folder, automatic));
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  const Resolved resolved = (*chosen)->ResolvedParameters();
  ASSERT_EQ(resolved.size(), 1u);
  const std::string& served = resolved.at("precision");
  EXPECT_EQ(served, encoder::PrecisionName(LoadedEncoderNetwork(**chosen)->weight_format));
  EXPECT_THAT((*chosen)->LoadSummary(), HasSubstr("CPU precision " + served + " (auto"));
  // The model runs by its config as given; only what it reports is resolved.
  EXPECT_EQ((*chosen)->config().parameters.at("precision"), "auto");
}

// Through the engine: GetModel (what ModelConfig shows) and GetStats (what /metrics labels) carry
// the resolved precision beside the config as given; a reload in another precision replaces both,
// an unload takes them away.
TEST_F(EncoderModelTest, EngineServesTheResolvedPrecisionInConfigAndStats) {
  auto engine = Engine::Create(EngineOptions{});
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::string folder = Write(TinyBert());
  ModelConfig automatic;
  automatic.parameters["precision"] = "auto";
  ASSERT_TRUE((*engine)->LoadModel(Spec(folder, automatic)).ok());
  auto info = (*engine)->GetModel("m", -1);
  ASSERT_TRUE(info.ok()) << info.status();
  const std::string served = info->resolved_parameters.at("precision");
  EXPECT_EQ(info->config->parameters.at("precision"), "auto");
  EXPECT_TRUE(served == "fp32" || served == "bf16" || served == "int8") << served;
  auto stats = (*engine)->GetStats("m", -1);
  ASSERT_TRUE(stats.ok() && stats->size() == 1u);
  EXPECT_EQ((*stats)[0].resolved_parameters.at("precision"), served);

  // A config that names no precision serves fp32, and says so.
  ASSERT_TRUE((*engine)->LoadModel(Spec(folder)).ok());
  info = (*engine)->GetModel("m", -1);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->resolved_parameters.at("precision"), "fp32");
  EXPECT_EQ(info->config->parameters.count("precision"), 0u);
  stats = (*engine)->GetStats("m", -1);
  ASSERT_TRUE(stats.ok() && stats->size() == 1u);
  EXPECT_EQ((*stats)[0].resolved_parameters.at("precision"), "fp32");

  if (encoder::gemm::Int8VnniSupported()) {
    ModelConfig int8;
    int8.parameters["precision"] = "int8";
    ASSERT_TRUE((*engine)->LoadModel(Spec(folder, int8)).ok());
    info = (*engine)->GetModel("m", -1);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->resolved_parameters.at("precision"), "int8");
    stats = (*engine)->GetStats("m", -1);
    ASSERT_TRUE(stats.ok() && stats->size() == 1u);
    EXPECT_EQ((*stats)[0].resolved_parameters.at("precision"), "int8");
  }

  ASSERT_TRUE((*engine)->UnloadModel("m").ok());
  stats = (*engine)->GetStats("", -1);
  ASSERT_TRUE(stats.ok());
  EXPECT_TRUE(stats->empty());
}

}  // namespace
}  // namespace sluice::engine::models
