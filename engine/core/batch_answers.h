#pragma once

// What every executor does the same way when a batch has run: which outputs each request gets,
// and the answer's header and timings. One definition, so the CPU and the CUDA executors cannot
// drift apart.

#include <chrono>
#include <cstddef>
#include <vector>

#include "engine/core/executor.h"
#include "engine/core/inference_request.h"
#include "engine/core/model_config.h"
#include "engine/core/model_stats.h"

namespace sluice::engine {

// Indices into config.outputs of the outputs `request` gets: those it named, in its order, or all
// of them in config order. (Names were checked at submit.)
std::vector<size_t> SelectedOutputs(const InferenceRequest& request, const ModelConfig& config);

// Sets each response's model name, version and id, and fills `timings` (one per request: queue
// time up to the batch's dispatch, total time up to `answered`) for ModelStats::RecordBatch.
// `responses` has one entry per request of `batch`, in order.
void StampAnswers(const Batch& batch, std::chrono::steady_clock::time_point answered,
                  std::vector<InferenceResponse>& responses, std::vector<RequestTiming>& timings);

}  // namespace sluice::engine
