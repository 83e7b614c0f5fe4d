// Private to runtime/data: the seeded permutation behind split_dataset and BatchLoader,
// a Fisher-Yates shuffle driven by core/random.h's generator rather than std::shuffle,
// whose order is implementation-defined: the same seed gives the same order everywhere.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem {

/// A permutation of 0..n-1 that depends only on (n, seed, stream).
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed, uint64_t stream);

/// The stream split_dataset draws from (BatchLoader uses the epoch number as its stream).
inline constexpr uint64_t kSplitStream = ~uint64_t{0};

}  // namespace tandem
