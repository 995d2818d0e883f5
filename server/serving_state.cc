#include "server/serving_state.h"

namespace sluice::server {

bool ServingState::ready() const {
  if (!ready_.load(std::memory_order_acquire)) return false;
  return !models_ready_ || models_ready_();
}

void ServingState::SetLive(bool live) {
  live_.store(live, std::memory_order_release);
  Announce();
}

void ServingState::SetReady(bool ready) {
  ready_.store(ready, std::memory_order_release);
  Announce();
}

void ServingState::ModelsChanged() { Announce(); }

void ServingState::Announce() {
  if (!on_change_) return;
  common::MutexLock lock(&announce_mu_);
  on_change_(live(), ready());
}

}  // namespace sluice::server
