// Private to runtime/data: the seeded generator behind split_dataset and BatchLoader.
// Written out here (splitmix64 seeding, xoshiro256**, Lemire's bounded draw, Fisher-Yates)
// rather than taken from <random>, whose distributions and std::shuffle are
// implementation-defined: the same seed must give the same order on every compiler.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem {

/// xoshiro256** seeded from (seed, stream) through splitmix64. Not thread-safe; cheap to copy.
class SeededRng {
 public:
  SeededRng(uint64_t seed, uint64_t stream);
  uint64_t next();
  /// Uniform in [0, bound), bound > 0, without modulo bias.
  uint64_t below(uint64_t bound);

 private:
  uint64_t s_[4];
};

/// A permutation of 0..n-1 that depends only on (n, seed, stream).
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed, uint64_t stream);

/// The stream split_dataset draws from (BatchLoader uses the epoch number as its stream).
inline constexpr uint64_t kSplitStream = ~uint64_t{0};

}  // namespace tandem
