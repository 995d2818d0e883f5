// json_parse_bench: the cost of JSON tensors on the HTTP path (issue 21). Parses an infer request
// whose `data` holds N FP32 values (shortest round-trip text, as a good client writes them) into
// raw floats, with simdjson (what server/http/json_conversion.cc uses) and with nlohmann-json
// (already a dependency), and writes the same floats back as JSON text (std::to_chars, as the
// server's response encoder does). Prints microseconds per request and MB/s of JSON, medians of
// --rounds rounds.
//
//   build/bench/json_parse_bench --elements 1024 --rounds 7

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "nlohmann/json.hpp"
#include "simdjson.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string MakeRequest(int elements, std::vector<float>& values) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  values.resize(elements);
  std::string text = "{\"inputs\":[{\"name\":\"INPUT0\",\"shape\":[1," + std::to_string(elements) +
                     "],\"datatype\":\"FP32\",\"data\":[";
  char buffer[32];
  for (int i = 0; i < elements; ++i) {
    values[i] = dist(rng);
    if (i > 0) text += ',';
    text.append(buffer, std::to_chars(buffer, buffer + sizeof(buffer), values[i]).ptr);
  }
  text += "]}]}";
  return text;
}

template <typename F>
double MedianMicros(int rounds, int iterations, F&& f) {
  std::vector<double> samples;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) f();
    samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                      iterations);
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"JSON tensor parse/encode cost: simdjson vs nlohmann-json"};
  int elements = 1024;
  int rounds = 7;
  int iterations = 200;
  app.add_option("--elements", elements, "FP32 values in the request")->capture_default_str();
  app.add_option("--rounds", rounds, "Timed rounds (the median is printed)")->capture_default_str();
  app.add_option("--iterations", iterations, "Requests per round")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::vector<float> expected;
  const std::string text = MakeRequest(elements, expected);
  std::vector<float> out(elements);
  bool ok = true;

  simdjson::dom::parser parser;
  const double simd_us = MedianMicros(rounds, iterations, [&] {
    simdjson::dom::element doc = parser.parse(text.data(), text.size()).value();
    size_t i = 0;
    for (simdjson::dom::element v : doc["inputs"].at(0)["data"].get_array()) {
      out[i++] = static_cast<float>(v.get_double().value());
    }
  });
  ok = ok && out == expected;

  const double nlohmann_us = MedianMicros(rounds, iterations, [&] {
    nlohmann::json doc = nlohmann::json::parse(text);
    size_t i = 0;
    for (const auto& v : doc["inputs"][0]["data"]) out[i++] = v.get<float>();
  });
  ok = ok && out == expected;

  std::string encoded;
  const double encode_us = MedianMicros(rounds, iterations, [&] {
    encoded.clear();
    char buffer[32];
    for (int i = 0; i < elements; ++i) {
      if (i > 0) encoded += ',';
      encoded.append(buffer, std::to_chars(buffer, buffer + sizeof(buffer), expected[i]).ptr);
    }
  });

  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("request: %d FP32 values, %zu bytes of JSON (%s)\n", elements, text.size(),
              ok ? "both parsers exact" : "MISMATCH");
  std::printf("parse simdjson   %9.1f us  %7.0f MB/s\n", simd_us, mb / (simd_us / 1e6));
  std::printf("parse nlohmann   %9.1f us  %7.0f MB/s  (%.1fx simdjson)\n", nlohmann_us,
              mb / (nlohmann_us / 1e6), nlohmann_us / simd_us);
  std::printf("encode to_chars  %9.1f us\n", encode_us);
  return ok ? 0 : 1;
}
