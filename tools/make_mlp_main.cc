// sluice-make-mlp: writes deterministic MLP weights as a safetensors file (see mlp_generator.h).
//
//   sluice-make-mlp --layers 784,512,512,10 --seed 1 --out models/mlp/1/model.safetensors
//   sluice-make-mlp --layers 4096*9 --out /tmp/mlp_large/1/model.safetensors
//
// Exit status: 0 written, 1 error (printed on stderr), 2 usage error.

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <system_error>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/mlp_generator.h"

namespace sluice::tools {
namespace {

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  const std::filesystem::path target(path);
  std::error_code error;
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create ", target.parent_path().string(), ": ", error.message()));
  }
  std::ofstream out(target, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  CLI::App app{
      "Writes deterministic MLP weights (PyTorch nn.Sequential state_dict names) as a "
      "safetensors file."};
  std::string layers;
  uint64_t seed = 1;
  std::string dtype = "F32";
  bool no_bias = false;
  std::string out;
  app.add_option("--layers", layers,
                 "feature counts from input to output, e.g. 784,512,512,10; N*R repeats N")
      ->required();
  app.add_option("--seed", seed, "seed of the splitmix64 stream")->capture_default_str();
  app.add_option("--dtype", dtype, "storage type of the weights")
      ->check(CLI::IsMember({"F32", "F16", "BF16"}))
      ->capture_default_str();
  app.add_flag("--no-bias", no_bias, "layers without bias (nn.Linear(bias=False))");
  app.add_option("--out", out, "the file to write (parent folders are created)")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : 2;
  }

  absl::StatusOr<std::vector<int64_t>> sizes = ParseLayerSizes(layers);
  if (!sizes.ok()) {
    std::cerr << "error: " << sizes.status().message() << "\n";
    return 2;
  }
  MlpWeightsOptions options;
  options.layer_sizes = *sizes;
  options.seed = seed;
  options.dtype = dtype == "F16"    ? engine::DataType::kFp16
                  : dtype == "BF16" ? engine::DataType::kBf16
                                    : engine::DataType::kFp32;
  options.bias = !no_bias;
  absl::StatusOr<std::string> bytes = GenerateMlpWeights(options);
  absl::Status written = bytes.ok() ? WriteFile(out, *bytes) : bytes.status();
  if (!written.ok()) {
    std::cerr << "error: " << written.message() << "\n";
    return 1;
  }
  std::cout << "wrote " << out << " (" << bytes->size() << " bytes, layers "
            << LayerSizesText(*sizes) << ", " << dtype << ", seed " << seed << ")\n";
  return 0;
}

}  // namespace
}  // namespace sluice::tools

int main(int argc, char** argv) { return sluice::tools::Main(argc, argv); }
