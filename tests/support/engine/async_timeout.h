#pragma once

// kAsyncTimeout: how long an engine test waits for what another thread does (an answer, a batch,
// a freed slot) before it fails. The engine tests' helpers (*_test_util.h here) share it.

#include <chrono>

namespace sluice::engine::testing {

inline constexpr auto kAsyncTimeout = std::chrono::seconds(10);

}  // namespace sluice::engine::testing
