#include "tools/encoder_generator.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/wire/float16.h"
#include "engine/core/tensor.h"
#include "engine/models/safetensors.h"

namespace sluice::tools {
namespace {

using engine::DataType;
namespace fs = std::filesystem;

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// `count` values center + uniform[-bound, bound), stored as `dtype`.
std::vector<std::byte> Draw(uint64_t& state, size_t count, double center, double bound,
                            DataType dtype) {
  const size_t element_size = engine::DataTypeByteSize(dtype);
  std::vector<std::byte> bytes(count * element_size);
  for (size_t i = 0; i < count; ++i) {
    const double u = static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53;
    const float value = static_cast<float>(center + (2.0 * u - 1.0) * bound);
    std::byte* out = bytes.data() + i * element_size;
    if (dtype == DataType::kFp32) {
      std::memcpy(out, &value, 4);
    } else {
      const uint16_t bits =
          dtype == DataType::kFp16 ? wire::FloatToHalf(value) : wire::FloatToBFloat16(value);
      std::memcpy(out, &bits, 2);
    }
  }
  return bytes;
}

absl::Status WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteEncoderCheckpoint(const EncoderCheckpointOptions& o, const std::string& folder) {
  for (int64_t size : {o.vocab_size, o.hidden_size, o.layers, o.heads, o.intermediate_size,
                       o.max_position_embeddings, o.type_vocab_size}) {
    if (size < 1 || size > (1 << 20)) {
      return absl::InvalidArgumentError(absl::StrCat("size ", size, " is outside [1, 2^20]"));
    }
  }
  if (o.hidden_size % o.heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("hidden size ", o.hidden_size, " is not a multiple of heads ", o.heads));
  }
  if (o.dtype != DataType::kFp32 && o.dtype != DataType::kFp16 && o.dtype != DataType::kBf16) {
    return absl::InvalidArgumentError("dtype must be FP32, FP16 or BF16");
  }
  const fs::path root(folder);
  std::error_code error;
  fs::create_directories(root, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create ", folder, ": ", error.message()));
  }

  uint64_t state = o.seed;
  const int64_t h = o.hidden_size;
  std::vector<std::vector<std::byte>> storage;
  std::vector<engine::TensorView> tensors;
  storage.reserve(static_cast<size_t>(16 * o.layers + 8));
  auto matrix = [&](const std::string& name, engine::Shape shape) {
    size_t count = 1;
    for (int64_t d : shape) count *= static_cast<size_t>(d);
    storage.push_back(Draw(state, count, 0.0, o.scale, o.dtype));
    tensors.push_back({name, o.dtype, shape, storage.back()});
  };
  auto norm = [&](const std::string& prefix) {
    storage.push_back(Draw(state, static_cast<size_t>(h), 1.0, 0.1, o.dtype));
    tensors.push_back({prefix + ".weight", o.dtype, {h}, storage.back()});
    storage.push_back(Draw(state, static_cast<size_t>(h), 0.0, 0.1, o.dtype));
    tensors.push_back({prefix + ".bias", o.dtype, {h}, storage.back()});
  };
  matrix("embeddings.word_embeddings.weight", {o.vocab_size, h});
  matrix("embeddings.position_embeddings.weight", {o.max_position_embeddings, h});
  matrix("embeddings.token_type_embeddings.weight", {o.type_vocab_size, h});
  norm("embeddings.LayerNorm");
  for (int64_t l = 0; l < o.layers; ++l) {
    const std::string p = absl::StrCat("encoder.layer.", l, ".");
    for (const char* part : {"query", "key", "value"}) {
      matrix(absl::StrCat(p, "attention.self.", part, ".weight"), {h, h});
      matrix(absl::StrCat(p, "attention.self.", part, ".bias"), {h});
    }
    matrix(p + "attention.output.dense.weight", {h, h});
    matrix(p + "attention.output.dense.bias", {h});
    norm(p + "attention.output.LayerNorm");
    matrix(p + "intermediate.dense.weight", {o.intermediate_size, h});
    matrix(p + "intermediate.dense.bias", {o.intermediate_size});
    matrix(p + "output.dense.weight", {h, o.intermediate_size});
    matrix(p + "output.dense.bias", {h});
    norm(p + "output.LayerNorm");
  }
  matrix("pooler.dense.weight", {h, h});
  matrix("pooler.dense.bias", {h});
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"generator", "sluice-make-encoder"}, {"seed", absl::StrCat(o.seed)}};
  RETURN_IF_ERROR(engine::models::WriteSafetensorsFile((root / "model.safetensors").string(),
                                                       tensors, metadata));

  const char* torch_dtype = o.dtype == DataType::kFp32   ? "float32"
                            : o.dtype == DataType::kFp16 ? "float16"
                                                         : "bfloat16";
  RETURN_IF_ERROR(WriteText(
      root / "config.json",
      absl::StrCat("{\n  \"architectures\": [\"BertModel\"],\n  \"model_type\": \"bert\",\n",
                   "  \"hidden_size\": ", h, ",\n  \"num_hidden_layers\": ", o.layers,
                   ",\n  \"num_attention_heads\": ", o.heads,
                   ",\n  \"intermediate_size\": ", o.intermediate_size,
                   ",\n  \"hidden_act\": \"gelu\",\n  \"vocab_size\": ", o.vocab_size,
                   ",\n  \"max_position_embeddings\": ", o.max_position_embeddings,
                   ",\n  \"type_vocab_size\": ", o.type_vocab_size,
                   ",\n  \"layer_norm_eps\": 1e-12,\n  \"pad_token_id\": 0,\n",
                   "  \"position_embedding_type\": \"absolute\",\n  \"torch_dtype\": \"",
                   torch_dtype, "\"\n}\n")));
  if (o.sentence_transformers) {
    RETURN_IF_ERROR(WriteText(
        root / "modules.json",
        "[\n  {\"idx\": 0, \"name\": \"0\", \"path\": \"\", \"type\": "
        "\"sentence_transformers.models.Transformer\"},\n  {\"idx\": 1, \"name\": \"1\", "
        "\"path\": \"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"},\n  "
        "{\"idx\": 2, \"name\": \"2\", \"path\": \"2_Normalize\", \"type\": "
        "\"sentence_transformers.models.Normalize\"}\n]\n"));
    fs::create_directories(root / "1_Pooling", error);
    RETURN_IF_ERROR(WriteText(
        root / "1_Pooling" / "config.json",
        absl::StrCat("{\n  \"word_embedding_dimension\": ", h,
                     ",\n  \"pooling_mode_cls_token\": false,\n  \"pooling_mode_mean_tokens\": "
                     "true,\n  \"pooling_mode_max_tokens\": false,\n  "
                     "\"pooling_mode_mean_sqrt_len_tokens\": false\n}\n")));
    RETURN_IF_ERROR(WriteText(root / "sentence_bert_config.json",
                              absl::StrCat("{\"max_seq_length\": ", o.max_position_embeddings,
                                           ", \"do_lower_case\": false}\n")));
  }
  return absl::OkStatus();
}

}  // namespace sluice::tools
