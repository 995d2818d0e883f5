#pragma once

// Deterministic random inputs: for load tests, smoke tests and `sluice-client --random`.
// Pure functions, safe from any thread; the wire conventions are those of client/tensor_codec.h.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/grpc_service.pb.h"

namespace sluice::client {

// Deterministic pseudo-random raw bytes for a tensor: integers in [0, 64) (signed: [-32, 32)),
// floats in [-1, 1), BOOL 0/1, BYTES elements the decimal text of integers in [0, 1000). The same
// (datatype, shape, seed) gives the same bytes on every platform. InvalidArgument for an unknown
// datatype or a negative dimension.
absl::StatusOr<std::string> RandomInput(absl::string_view datatype, absl::Span<const int64_t> shape,
                                        uint64_t seed);

// Token ids of random requests are drawn from [0, kDefaultTokenIdLimit) unless told otherwise:
// inside any vocabulary (BERT's has 30522 ids, the bundled embedder's 4096).
inline constexpr int64_t kDefaultTokenIdLimit = 64;

// A request for `metadata.name()` with one random input per metadata input (RandomInput with seed
// `seed + input index`). Each -1 dimension becomes `sequence_length`, except a leading -1 (the
// batch dimension of a model with max_batch_size > 0), which becomes `batch_size`. Inputs with
// the Triton BERT names of sequence models get values such a model accepts: `attention_mask` all
// ones, `token_type_ids` all zeros, `input_ids` uniform in [0, token_id_limit) (choose a limit no
// greater than the model's vocabulary size).
// A model with both `input_ids` and BYTES `text`/`text_pair` inputs (an encoder with a
// tokenizer, which takes one or the other) gets token ids only.
// REQUIRES: batch_size >= 1, sequence_length >= 1, token_id_limit >= 1 (InvalidArgument
// otherwise).
absl::StatusOr<inference::ModelInferRequest> MakeRandomRequest(
    const inference::ModelMetadataResponse& metadata, int64_t batch_size = 1, uint64_t seed = 0,
    int64_t sequence_length = 1, int64_t token_id_limit = kDefaultTokenIdLimit);

// Sequence lengths for ragged traffic: each request draws its own length from [min, max].
struct LengthRange {
  int64_t min = 1;
  int64_t max = 1;
  bool fixed() const { return min == max; }
};

// "N" (every request N long) or "MIN:MAX" (each request a length drawn uniformly from MIN to MAX,
// both included), with 1 <= MIN <= MAX <= max_length. InvalidArgument quoting the text otherwise.
absl::StatusOr<LengthRange> ParseLengthRange(absl::string_view text, int64_t max_length);

// The length of request number `index` of a run seeded with `seed`: uniform over [range.min,
// range.max] (every length equally likely, up to a bias below 2^-40), and a pure function of its
// arguments, so that a run's n-th request has the same length on every machine and whatever
// order threads sent in. REQUIRES: 1 <= range.min <= range.max.
[[nodiscard]] int64_t DrawLength(const LengthRange& range, uint64_t seed, uint64_t index);

}  // namespace sluice::client
