// The encoder on the GPU, host side of a batch (cuda_encoder.h): packing the requests' tokens into
// a slot's pinned input block for the smallest bucket that holds them (the device reads the real
// counts and lengths from that block, so one captured graph serves every batch of a bucket), the
// output ranges worth copying back, and each request's answers from the output block. Packing and
// output assembly are the CPU encoder's own (engine/models/encoder/encoder_batch.h).

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/core/batch_answers.h"
#include "engine/cuda/cuda_encoder.h"

namespace sluice::engine::cuda::gpu_encoder {

absl::Status CudaEncoder::Pack(const Batch& batch, RaggedBatchState& base, void* staging) {
  auto& state = static_cast<EncoderBatchState&>(base);
  const enc::EncoderNetwork& net = *net_;
  state.packed.Clear();
  state.request_tokens.clear();
  state.shapes.clear();
  state.wanted.clear();
  state.want_hidden = state.want_embedding = state.want_pooler = state.want_logits = false;
  for (const auto& request : batch.requests) {
    for (const TensorView& input : request->inputs) {
      // The engine refuses device inputs to ragged models at submit; one here would be read as
      // host memory.
      if (input.on_device()) {
        return absl::InvalidArgumentError(absl::StrCat("model '", config_.name, "': input '",
                                                       input.name, "' is in device memory"));
      }
    }
    const enc::RequestTokens tokens = enc::FindRequestTokens(request->inputs);
    ASSIGN_OR_RETURN(const enc::RequestShape shape, enc::PackRequest(net, tokens, state.packed));
    std::vector<bool> wanted = enc::WantedOutputs(config_, request->requested_outputs);
    for (size_t o = 0; o < config_.outputs.size(); ++o) {
      if (!wanted[o]) continue;
      const std::string& name = config_.outputs[o].name;
      state.want_hidden |= name == enc::kLastHiddenStateName;
      state.want_embedding |= name == enc::kEmbeddingName;
      state.want_pooler |= name == enc::kPoolerOutputName;
      // `score` is the logits through the checkpoint's activation (encoder::RequestOutputs).
      state.want_logits |= name == enc::kLogitsName || name == enc::kScoreName;
    }
    state.request_tokens.push_back(tokens);
    state.shapes.push_back(shape);
    state.wanted.push_back(std::move(wanted));
  }
  state.sequences = state.packed.sequences();
  state.tokens = state.packed.tokens();
  int chosen = -1;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (state.sequences <= buckets_[b].sequences && state.tokens <= buckets_[b].tokens) {
      chosen = static_cast<int>(b);
      break;
    }
  }
  if (chosen < 0) {
    // Only a lone request above the token budget gets here (the batcher lets it through alone).
    const RaggedBucket& largest = buckets_.back();
    return absl::InvalidArgumentError(
        absl::StrCat("model '", config_.name, "': a batch of ", state.sequences, " sequences and ",
                     state.tokens, " tokens does not fit the largest CUDA bucket (",
                     largest.sequences, " sequences, ", largest.tokens,
                     " tokens); on the GPU a request may carry at most that many tokens "
                     "(parameters max_batch_tokens and ",
                     enc::kCudaBucketsParam, ")"));
  }
  state.bucket = chosen;
  const RaggedBucket& bucket = buckets_[chosen];
  const InputLayout& in = inputs_[chosen];
  auto* base_bytes = static_cast<std::byte*>(staging);
  const auto ints = [base_bytes](size_t offset) {
    return reinterpret_cast<int32_t*>(base_bytes + offset);
  };
  ints(in.counts)[0] = state.sequences;
  ints(in.counts)[1] = static_cast<int32_t>(state.tokens);
  int32_t* cu = ints(in.cu_seqlens);
  for (int s = 0; s <= bucket.sequences; ++s) {
    // Past the real sequences: empty ones at the end (attention and pooling skip them).
    cu[s] = static_cast<int32_t>(state.packed.offsets[std::min(s, state.sequences)]);
  }
  const size_t real = static_cast<size_t>(state.tokens) * sizeof(int32_t);
  const size_t pad = static_cast<size_t>(bucket.tokens - state.tokens) * sizeof(int32_t);
  const auto fill = [&](size_t offset, const int32_t* values) {
    if (real > 0) std::memcpy(base_bytes + offset, values, real);
    std::memset(base_bytes + offset + real, 0, pad);
  };
  fill(in.token_ids, state.packed.token_ids.data());
  fill(in.token_types, state.packed.token_types.data());
  fill(in.positions, state.packed.positions.data());
  int32_t* attend = ints(in.attend);
  for (int64_t t = 0; t < state.tokens; ++t) attend[t] = state.packed.attend[t];
  std::memset(attend + state.tokens, 0, pad);
  return absl::OkStatus();
}

void CudaEncoder::PackEmpty(int bucket, RaggedBatchState& base, void* staging) {
  auto& state = static_cast<EncoderBatchState&>(base);
  state.packed.Clear();
  state.request_tokens.clear();
  state.shapes.clear();
  state.wanted.clear();
  state.sequences = 0;
  state.tokens = 0;
  state.bucket = bucket;
  // Zero counts, every cu_seqlens entry 0 (all sequences empty), token id 0 everywhere.
  std::memset(staging, 0, inputs_[bucket].bytes);
}

void CudaEncoder::OutputRanges(const RaggedBatchState& base,
                               std::vector<BlockRange>& ranges) const {
  const auto& state = static_cast<const EncoderBatchState&>(base);
  const enc::EncoderNetwork& net = *net_;
  const OutputLayout& out = outputs_[state.bucket];
  const size_t sequences = static_cast<size_t>(state.sequences);
  ranges.clear();
  if (state.want_hidden) {
    ranges.push_back({out.hidden, static_cast<size_t>(state.tokens) * net.hidden * 4});
  }
  if (state.want_embedding) {
    ranges.push_back({out.embedding, sequences * net.embedding_size() * 4});
  }
  if (state.want_pooler && out.pooler != kAbsent) {
    ranges.push_back({out.pooler, sequences * net.hidden * 4});
  }
  if (state.want_logits && out.logits != kAbsent) {
    ranges.push_back({out.logits, sequences * net.num_labels * 4});
  }
  // Empty ranges (a batch that wants none of these, e.g. only input_ids) copy nothing.
  std::erase_if(ranges, [](const BlockRange& range) { return range.bytes == 0; });
}

BlockRange CudaEncoder::NonFiniteRange(const RaggedBatchState& base) const {
  // The embeddings: every real sequence's, always computed, a few floats each. A NaN or inf in
  // the hidden states reaches them through the mean (the max and CLS modes may miss one).
  const auto& state = static_cast<const EncoderBatchState&>(base);
  return {outputs_[state.bucket].embedding,
          static_cast<size_t>(state.sequences) * net_->embedding_size() * 4};
}

absl::Status CudaEncoder::Scatter(const Batch& batch, const RaggedBatchState& base,
                                  const void* outputs,
                                  std::vector<InferenceResponse>& responses) const {
  const auto& state = static_cast<const EncoderBatchState&>(base);
  if (state.shapes.size() != batch.requests.size()) {
    return absl::InternalError(absl::StrCat("model '", config_.name, "': the slot packed ",
                                            state.shapes.size(), " requests, the batch has ",
                                            batch.requests.size()));
  }
  const auto* base_bytes = static_cast<const std::byte*>(outputs);
  const OutputLayout& out = outputs_[state.bucket];
  const auto floats = [base_bytes](size_t offset) {
    return offset == kAbsent ? nullptr : reinterpret_cast<const float*>(base_bytes + offset);
  };
  const enc::PackedResults results{.hidden = floats(out.hidden),
                                   .embedding = floats(out.embedding),
                                   .pooler = floats(out.pooler),
                                   .logits = floats(out.logits)};
  responses.resize(batch.requests.size());
  int first_sequence = 0;
  for (size_t r = 0; r < batch.requests.size(); ++r) {
    const InferenceRequest& request = *batch.requests[r];
    std::vector<Tensor> tensors =
        enc::RequestOutputs(config_, *net_, state.packed, state.request_tokens[r], state.shapes[r],
                            first_sequence, state.wanted[r], results);
    for (size_t index : SelectedOutputs(request, config_)) {
      Tensor& tensor = tensors[index];
      if (tensor.name != config_.outputs[index].name) {
        return absl::InternalError(absl::StrCat("model '", config_.name, "': output '",
                                                config_.outputs[index].name,
                                                "' was not computed for a request that wants it"));
      }
      responses[r].outputs.push_back(std::move(tensor));
    }
    first_sequence += static_cast<int>(state.shapes[r].rows);
  }
  return absl::OkStatus();
}

}  // namespace sluice::engine::cuda::gpu_encoder
