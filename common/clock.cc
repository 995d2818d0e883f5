#include "common/clock.h"

namespace sluice::common {

const Clock& SteadyClock::Default() {
  static const SteadyClock clock;
  return clock;
}

}  // namespace sluice::common
