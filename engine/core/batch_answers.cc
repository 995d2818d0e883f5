#include "engine/core/batch_answers.h"

namespace sluice::engine {

std::vector<size_t> SelectedOutputs(const InferenceRequest& request, const ModelConfig& config) {
  std::vector<size_t> selected;
  if (request.requested_outputs.empty()) {
    for (size_t i = 0; i < config.outputs.size(); ++i) selected.push_back(i);
    return selected;
  }
  for (const std::string& name : request.requested_outputs) {
    for (size_t i = 0; i < config.outputs.size(); ++i) {
      if (config.outputs[i].name == name) {
        selected.push_back(i);
        break;
      }
    }
  }
  return selected;
}

void StampAnswers(const Batch& batch, std::chrono::steady_clock::time_point answered,
                  std::vector<InferenceResponse>& responses, std::vector<RequestTiming>& timings) {
  timings.clear();
  for (size_t r = 0; r < batch.requests.size(); ++r) {
    const InferenceRequest& request = *batch.requests[r];
    timings.push_back({request.id, request.batch_size, batch.dispatch_time - request.enqueue_time,
                       answered - request.received_time});
    responses[r].model_name = request.model_name();
    responses[r].model_version = request.resolved_version;
    responses[r].id = request.id;
  }
}

}  // namespace sluice::engine
