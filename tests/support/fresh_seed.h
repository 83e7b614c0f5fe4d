// A fresh seed for each run of a test, printed by the test (INFO) so that a failure can be
// repeated: TANDEM_TEST_SEED=<seed> gives that run's inputs again.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

namespace tandem::testing {

inline uint32_t fresh_seed() {
  if (const char* s = std::getenv("TANDEM_TEST_SEED")) return static_cast<uint32_t>(std::stoul(s));
  return std::random_device{}();
}

}  // namespace tandem::testing
