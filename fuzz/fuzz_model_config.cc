// Fuzz target: a config.pbtxt as a user could write it, through the text parser, the check of
// supported fields and the conversion, and the backend's own check (CreateModel) for the backends
// that need no files.

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/backend_registry.h"
#include "engine/core/backend.h"
#include "server/model_config_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto proto = sluice::server::ParseModelConfigText(text, "fuzz/config.pbtxt");
  if (!proto.ok()) return 0;
  auto config = sluice::server::ToEngineModelConfig(*proto, "fuzzed");
  if (!config.ok()) return 0;
  if (config->backend == "mlp") return 0;  // reads weight files: covered by fuzz_safetensors
  (void)sluice::engine::CreateModel(sluice::engine::ModelSpec{*config, 1, ""});
  return 0;
}
