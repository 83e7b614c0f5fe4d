#include "runtime/data/seeded_permutation.h"

#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/random.h"

namespace tandem {

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed, uint64_t stream) {
  TANDEM_ASSERT(n >= 0, "seeded_permutation of a negative count");
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  Rng rng(seed, stream);
  for (int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace tandem
