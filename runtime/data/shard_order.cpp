#include "runtime/data/shard_order.h"

#include "core/error.h"

namespace tandem {

std::vector<int64_t> shard_order(const std::vector<int64_t>& order, int rank, int ranks, bool drop_last) {
  TANDEM_ASSERT(ranks >= 1 && rank >= 0 && rank < ranks, "rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  const size_t n = order.size(), r = static_cast<size_t>(ranks);
  const size_t total = drop_last ? n / r * r : (n + r - 1) / r * r;
  std::vector<int64_t> mine;
  if (n == 0) return mine;
  mine.reserve(total / r);
  for (size_t i = static_cast<size_t>(rank); i < total; i += r) mine.push_back(order[i % n]);  // i >= n: the padding
  return mine;
}

}  // namespace tandem
