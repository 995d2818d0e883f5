// The driver for fuzz targets in an ordinary (gcc) build, where libFuzzer is not linked: runs
// every file of the seed corpus through LLVMFuzzerTestOneInput, then random mutations of them
// (bit flips, byte changes, insertions, deletions, truncations, splices of two inputs) for a
// bounded time. Not coverage-guided; it makes every test run exercise the target on inputs near
// the corpus, and it replays crash files that a libFuzzer campaign (scripts/fuzz.sh) left.
//
//   fuzz_<target> [--seconds=S] [--seed=N] CORPUS_DIR_OR_FILE...

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void Run(const std::string& input) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

std::string Mutate(std::string input, const std::vector<std::string>& corpus,
                   std::mt19937_64& rng) {
  const int steps = 1 + static_cast<int>(rng() % 4);
  for (int step = 0; step < steps; ++step) {
    const size_t size = input.size();
    switch (rng() % 6) {
      case 0:  // flip a bit
        if (size > 0) input[rng() % size] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // set a byte to an interesting value
        if (size > 0) {
          static constexpr unsigned char kValues[] = {0, 1, 0x7f, 0x80, 0xff, '-', '9', '{', '"'};
          input[rng() % size] = static_cast<char>(kValues[rng() % sizeof(kValues)]);
        }
        break;
      case 2:  // insert random bytes
        input.insert(size == 0 ? 0 : rng() % size,
                     std::string(1 + rng() % 8, static_cast<char>(rng())));
        break;
      case 3:  // delete a range
        if (size > 0) {
          const size_t at = rng() % size;
          input.erase(at, 1 + rng() % std::min<size_t>(16, size - at));
        }
        break;
      case 4:  // truncate
        if (size > 0) input.resize(rng() % size);
        break;
      case 5: {  // splice with another corpus input
        const std::string& other = corpus[rng() % corpus.size()];
        if (!other.empty()) {
          const size_t cut = size == 0 ? 0 : rng() % size;
          input = input.substr(0, cut) + other.substr(rng() % other.size());
        }
        break;
      }
    }
  }
  return input;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  uint64_t seed = 1;
  std::vector<std::string> corpus;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--seconds=", 0) == 0) {
      seconds = std::stod(arg.substr(10));
    } else if (arg.rfind("--seed=", 0) == 0) {
      seed = std::stoull(arg.substr(7));
    } else if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) corpus.push_back(ReadFile(entry.path()));
      }
    } else if (std::filesystem::is_regular_file(arg)) {
      corpus.push_back(ReadFile(arg));
    } else {
      std::fprintf(stderr, "%s: no such corpus file or folder\n", arg.c_str());
      return 2;
    }
  }
  if (corpus.empty()) {
    std::fprintf(stderr, "usage: %s [--seconds=S] [--seed=N] CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  for (const std::string& input : corpus) Run(input);
  std::mt19937_64 rng(seed);
  uint64_t runs = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 64; ++i, ++runs) Run(Mutate(corpus[rng() % corpus.size()], corpus, rng));
  }
  std::printf("%zu corpus inputs and %llu mutations ran without a crash\n", corpus.size(),
              static_cast<unsigned long long>(runs));
  return 0;
}
