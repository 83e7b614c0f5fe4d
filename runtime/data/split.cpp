#include "runtime/data/dataset.h"

#include <cmath>

#include "runtime/data/seeded_permutation.h"

namespace tandem {

std::pair<Dataset, Dataset> split_dataset(const Dataset& data, double validation_fraction, uint64_t seed) {
  if (!(validation_fraction >= 0.0 && validation_fraction < 1.0))
    throw UserError("validation fraction must lie in [0, 1), got " + std::to_string(validation_fraction));
  const int64_t n = data.size();
  const auto n_val = static_cast<int64_t>(std::llround(validation_fraction * static_cast<double>(n)));
  if (n > 0 && n_val >= n)
    throw UserError("validation fraction " + std::to_string(validation_fraction) + " of " + std::to_string(n) +
                    " samples leaves none to train on");
  std::vector<int64_t> order = seeded_permutation(n, seed, kSplitStream);
  std::span<const int64_t> all(order);
  return {data.subset(all.first(static_cast<size_t>(n - n_val))), data.subset(all.last(static_cast<size_t>(n_val)))};
}

}  // namespace tandem
