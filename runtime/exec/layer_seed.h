// The seed a layer's random draws (dropout's mask) take in one pass: the pass's seed mixed
// with the layer's step in the plan. Written once, because the promise that a placed run
// matches the cpu alone bit for bit rests on every executor, forward and backward, drawing
// the same mask for the same layer.
#pragma once

#include <cstdint>

#include "backends/dropout_mask.h"

namespace tandem {

/// The seed of step `step` of a pass seeded with `pass_seed`.
constexpr uint64_t layer_seed(uint64_t pass_seed, int64_t step) {
  return pass_seed * golden_ratio_64 + static_cast<uint64_t>(step);
}

}  // namespace tandem
