#include "engine/models/encoder/encoder_sentence_modules.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/echo.h"
#include "common/status_macros.h"
#include "engine/models/encoder/encoder_config_json.h"
#include "engine/models/safetensors.h"

namespace sluice::engine::models::encoder {
namespace {

namespace fs = std::filesystem;

// Sizes a Dense module may give (as config.json's sizes: a bound on what a hostile folder makes
// the load allocate; real Dense layers are at most a few thousand wide).
constexpr int64_t kMaxDenseFeatures = 1 << 20;
constexpr size_t kMaxDenseModules = 16;

// A module folder from modules.json: inside the model, never above it.
absl::StatusOr<fs::path> ModuleFolder(const fs::path& modules_path, const fs::path& folder,
                                      const std::string& type, const std::string& path) {
  if (path.empty() || path.find("..") != std::string::npos || path.front() == '/') {
    return absl::InvalidArgumentError(absl::StrCat("'", modules_path.string(), "': ", type,
                                                   " module path '", path,
                                                   "' must be a folder inside the model"));
  }
  return folder / path;
}

absl::Status ReadPooling(const fs::path& pooling_path, EncoderNetwork& net) {
  ASSIGN_OR_RETURN(Json pooling, ReadJsonFile(pooling_path));
  net.pooling.cls = BoolField(pooling, "pooling_mode_cls_token");
  net.pooling.max = BoolField(pooling, "pooling_mode_max_tokens");
  net.pooling.mean = BoolField(pooling, "pooling_mode_mean_tokens");
  net.pooling.mean_sqrt_len = BoolField(pooling, "pooling_mode_mean_sqrt_len_tokens");
  net.pooling.weightedmean = BoolField(pooling, "pooling_mode_weightedmean_tokens");
  net.pooling.lasttoken = BoolField(pooling, "pooling_mode_lasttoken");
  if (net.pooling.count() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", pooling_path.string(), "' enables no pooling mode"));
  }
  if (auto it = pooling.find("include_prompt");
      it != pooling.end() && it->is_boolean() && !it->get<bool>()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", pooling_path.string(),
        "': include_prompt false (pooling that leaves out the prompt's tokens, as INSTRUCTOR "
        "models do) is not supported"));
  }
  if (pooling.contains("word_embedding_dimension")) {
    ASSIGN_OR_RETURN(int64_t dim, IntField(pooling, pooling_path, "word_embedding_dimension",
                                           std::nullopt, 1, kMaxDenseFeatures));
    if (dim != net.hidden) {
      return absl::InvalidArgumentError(absl::StrCat("'", pooling_path.string(),
                                                     "': word_embedding_dimension ", dim,
                                                     " differs from hidden_size ", net.hidden));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadDenseConfig(const fs::path& dense_folder, const std::string& relative,
                             int in_features, EncoderNetwork& net) {
  const fs::path path = dense_folder / "config.json";
  ASSIGN_OR_RETURN(Json config, ReadJsonFile(path));
  DenseLayer layer;
  layer.path = relative;
  ASSIGN_OR_RETURN(int64_t in,
                   IntField(config, path, "in_features", std::nullopt, 1, kMaxDenseFeatures));
  ASSIGN_OR_RETURN(int64_t out,
                   IntField(config, path, "out_features", std::nullopt, 1, kMaxDenseFeatures));
  if (in != in_features) {
    return absl::InvalidArgumentError(absl::StrCat("'", path.string(), "': in_features ", in,
                                                   " but the module before it gives ", in_features,
                                                   " values"));
  }
  layer.in_features = static_cast<int>(in);
  layer.out_features = static_cast<int>(out);
  // Dense(bias=True) is sentence-transformers' default; the config says so explicitly.
  auto bias = config.find("bias");
  layer.has_bias = bias == config.end() || !bias->is_boolean() || bias->get<bool>();
  ASSIGN_OR_RETURN(const std::string activation,
                   StringField(config, path, "activation_function",
                               std::string("torch.nn.modules.activation.Tanh")));
  absl::StatusOr<DenseActivation> parsed = ParseDenseActivation(activation);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path.string(), "': ", parsed.status().message()));
  }
  layer.activation = *parsed;
  net.dense.push_back(std::move(layer));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DenseActivation> ParseDenseActivation(const std::string& name) {
  // sentence-transformers writes the class's full name (fullname(nn.Tanh()) is
  // "torch.nn.modules.activation.Tanh"); the class name decides.
  const size_t dot = name.rfind('.');
  const std::string cls = dot == std::string::npos ? name : name.substr(dot + 1);
  if (cls == "Identity") return DenseActivation::kIdentity;
  if (cls == "Tanh") return DenseActivation::kTanh;
  if (cls == "ReLU") return DenseActivation::kRelu;
  if (cls == "Sigmoid") return DenseActivation::kSigmoid;
  if (cls == "GELU") return DenseActivation::kGelu;
  return absl::InvalidArgumentError(
      absl::StrCat("activation_function '", name,
                   "' is not supported (supported: torch.nn Identity, Tanh, ReLU, Sigmoid, GELU)"));
}

absl::Status ReadSentenceModules(const fs::path& folder, EncoderNetwork& net) {
  fs::path pooling_dir = folder / "1_Pooling";
  const fs::path modules_path = folder / "modules.json";
  std::error_code ec;
  bool pooled = false;
  if (fs::exists(modules_path, ec)) {
    ASSIGN_OR_RETURN(std::string text, ReadSmallFile(modules_path));
    Json modules = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (modules.is_discarded() || !modules.is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", modules_path.string(), "' is not a JSON array"));
    }
    for (const Json& module : modules) {
      if (!module.is_object()) continue;
      const std::string type = module.value("type", "");
      const std::string path = module.value("path", "");
      const auto refuse = [&](absl::string_view why) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", modules_path.string(), "': module '", type, "' ", why));
      };
      if (net.normalize && !absl::EndsWith(type, ".Dropout")) {
        return refuse(
            "after Normalize: sluice runs Normalize last, as sentence-transformers' "
            "own models have it");
      }
      if (absl::EndsWith(type, ".Transformer") || absl::EndsWith(type, ".Dropout")) continue;
      if (absl::EndsWith(type, ".Normalize")) {
        net.normalize = true;
      } else if (absl::EndsWith(type, ".Pooling")) {
        if (pooled) return refuse("is a second Pooling module");
        ASSIGN_OR_RETURN(pooling_dir, ModuleFolder(modules_path, folder, "Pooling", path));
        RETURN_IF_ERROR(ReadPooling(pooling_dir / "config.json", net));
        pooled = true;
      } else if (absl::EndsWith(type, ".Dense")) {
        if (!pooled) return refuse("comes before any Pooling module (it maps sentence embeddings)");
        if (net.dense.size() >= kMaxDenseModules) {
          return refuse(absl::StrCat("is more than ", kMaxDenseModules, " Dense modules"));
        }
        ASSIGN_OR_RETURN(const fs::path dense_dir,
                         ModuleFolder(modules_path, folder, "Dense", path));
        const int in = net.dense.empty() ? net.pooled_size() : net.dense.back().out_features;
        RETURN_IF_ERROR(ReadDenseConfig(dense_dir, path, in, net));
      } else {
        return refuse("is not supported (supported: Transformer, Pooling, Dense, Normalize)");
      }
    }
  }
  if (pooled) return absl::OkStatus();
  const fs::path pooling_path = pooling_dir / "config.json";
  if (!fs::exists(pooling_path, ec)) {
    // BertModel users take the first token (so does the pooler); a decoder's summary is its last
    // (Qwen3-Embedding's pooling).
    if (net.arch == EncoderArch::kQwen3) {
      net.pooling.lasttoken = true;
    } else {
      net.pooling.cls = true;
    }
    return absl::OkStatus();
  }
  return ReadPooling(pooling_path, net);
}

absl::Status ReadDenseWeights(const fs::path& folder, EncoderNetwork& net) {
  for (DenseLayer& layer : net.dense) {
    const fs::path path = folder / layer.path / "model.safetensors";
    std::error_code ec;
    if (!fs::exists(path, ec) && fs::exists(folder / layer.path / "pytorch_model.bin", ec)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Dense module '", layer.path,
          "' has only pytorch_model.bin (a pickle, which sluice does not read): save it again "
          "with safetensors (sentence-transformers' default since 2.3)"));
    }
    ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path.string()));
    const auto read = [&](const char* name,
                          const Shape& shape) -> absl::StatusOr<std::vector<float>> {
      const TensorView* tensor = file.Find(name);
      if (tensor == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("safetensors file '", path.string(),
                                                       "' has no tensor '", name, "' (shape ",
                                                       ShapeToString(shape), ")"));
      }
      if (tensor->shape != shape) {
        return absl::InvalidArgumentError(
            absl::StrCat("safetensors file '", path.string(), "': tensor '", name, "' has shape ",
                         ShapeToString(tensor->shape), ", ", layer.path, "/config.json needs ",
                         ShapeToString(shape)));
      }
      absl::StatusOr<std::vector<float>> values = ToFloat32(*tensor);
      if (!values.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("safetensors file '", path.string(), "': ", values.status().message()));
      }
      return values;
    };
    ASSIGN_OR_RETURN(layer.weight, read("linear.weight", {layer.out_features, layer.in_features}));
    if (layer.has_bias) {
      ASSIGN_OR_RETURN(layer.bias, read("linear.bias", {layer.out_features}));
    }
  }
  return absl::OkStatus();
}

}  // namespace sluice::engine::models::encoder
