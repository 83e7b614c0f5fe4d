#include "runtime/data/dataset.h"

#include <algorithm>
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
  // The permutation only chooses which samples validate; both parts keep the file's
  // order, so that an unshuffled run reads its data as written, whatever the seed.
  std::vector<int64_t> order = seeded_permutation(n, seed, kSplitStream);
  std::vector<int64_t> train(order.begin(), order.end() - n_val), validation(order.end() - n_val, order.end());
  std::sort(train.begin(), train.end());
  std::sort(validation.begin(), validation.end());
  return {data.subset(train), data.subset(validation)};
}

}  // namespace tandem
