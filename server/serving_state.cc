#include "server/serving_state.h"

namespace sluice::server {

void ServingState::SetLive(bool live) {
  live_.store(live, std::memory_order_release);
  if (on_change_) on_change_(live, ready());
}

void ServingState::SetReady(bool ready) {
  ready_.store(ready, std::memory_order_release);
  if (on_change_) on_change_(live(), ready);
}

}  // namespace sluice::server
