// The seed a layer's random draws (dropout's mask) take in one pass: the pass's seed mixed
// with the layer's step in the plan. Written once, because the promise that a placed run
// matches the cpu alone bit for bit rests on every executor, forward and backward, drawing
// the same mask for the same layer.
#pragma once

#include <cstdint>

namespace tandem {

/// The 64-bit golden ratio: splitmix64's increment, which spreads consecutive seeds apart.
inline constexpr uint64_t seed_mixer = 0x9e3779b97f4a7c15ULL;

/// The seed of step `step` of a pass seeded with `pass_seed`.
constexpr uint64_t layer_seed(uint64_t pass_seed, int64_t step) {
  return pass_seed * seed_mixer + static_cast<uint64_t>(step);
}

}  // namespace tandem
