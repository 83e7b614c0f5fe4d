// The dropout mask: a counter-based generator, so element i's draw depends only on
// (seed, i). The mask is the same for a given seed whatever the thread count or the
// chunking, and any element can be drawn on its own (the reference uses this too).
// The CUDA backend's dropout (backends/cuda/kernels/dropout.cu) draws the same mask
// from these functions, compiled for the device as well.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TANDEM_HOST_DEVICE __host__ __device__
#else
#define TANDEM_HOST_DEVICE
#endif

namespace tandem {

/// The 64-bit golden ratio, SplitMix64's increment: it spreads consecutive counters and seeds
/// apart. Every seed Tandem derives (a layer's in a pass: runtime/exec/layer_seed.h; an
/// element's here) mixes with this one constant.
inline constexpr uint64_t golden_ratio_64 = 0x9E3779B97F4A7C15ull;

/// SplitMix64's finaliser of (seed, counter): a well-mixed 64-bit value.
TANDEM_HOST_DEVICE inline uint64_t counter_hash(uint64_t seed, uint64_t counter) {
  uint64_t z = seed * 0xD1B54A32D192ED03ull + (counter + 1) * golden_ratio_64;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// A uniform draw in [0, 1) for element `index`, with 24 bits of resolution.
TANDEM_HOST_DEVICE inline float dropout_uniform(uint64_t seed, uint64_t index) {
  return static_cast<float>(counter_hash(seed, index) >> 40) * (1.0f / 16777216.0f);
}

/// Whether element `index` is kept when dropping with probability p (kept with prob 1-p).
TANDEM_HOST_DEVICE inline bool dropout_keep(uint64_t seed, uint64_t index, float p) {
  return dropout_uniform(seed, index) >= p;
}

/// What a kept element is multiplied by: 1 / (1 - p), or 0 when every element drops.
TANDEM_HOST_DEVICE inline float dropout_scale(float p) { return p < 1.f ? 1.f / (1.f - p) : 0.f; }

/// The seed of the `k`-th dropout inside one layer's call (between a recurrent layer's
/// stacked layers), from the call's seed: independent of the others and of `seed` itself.
TANDEM_HOST_DEVICE inline uint64_t inner_dropout_seed(uint64_t seed, uint64_t k) {
  return counter_hash(seed ^ 0x5DEECE66Dull, k);
}

}  // namespace tandem
