#include "runtime/data/seeded_permutation.h"

#include <numeric>
#include <utility>

#include "core/error.h"

namespace tandem {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

SeededRng::SeededRng(uint64_t seed, uint64_t stream) {
  // Hash the pair first so that nearby (seed, stream) pairs give unrelated states.
  uint64_t h = seed;
  uint64_t key = splitmix64(h);
  h = key ^ stream;
  key = splitmix64(h);
  for (uint64_t& word : s_) word = splitmix64(key);
}

uint64_t SeededRng::next() {
  uint64_t result = rotl(s_[1] * 5, 7) * 9;
  uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

uint64_t SeededRng::below(uint64_t bound) {
  TANDEM_ASSERT(bound > 0, "SeededRng::below(0)");
  // Lemire, "Fast random integer generation in an interval" (2019).
  unsigned __int128 m = static_cast<unsigned __int128>(next()) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    uint64_t threshold = -bound % bound;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next()) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed, uint64_t stream) {
  TANDEM_ASSERT(n >= 0, "seeded_permutation of a negative count");
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  SeededRng rng(seed, stream);
  for (int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace tandem
