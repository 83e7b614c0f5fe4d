// The samples each rank takes in an epoch: torch's DistributedSampler's rule.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <vector>

#include "runtime/data/shard_order.h"

using namespace tandem;

TEST_CASE("ranks take every N-th sample, padded from the start or cut to a multiple of N", "[distributed][sampler]") {
  std::vector<int64_t> order(10);
  std::iota(order.begin(), order.end(), 100);  // the epoch's order of samples 100..109
  CHECK(shard_order(order, 0, 3, false) == std::vector<int64_t>{100, 103, 106, 109});
  CHECK(shard_order(order, 1, 3, false) == std::vector<int64_t>{101, 104, 107, 100});  // padded with the start
  CHECK(shard_order(order, 2, 3, false) == std::vector<int64_t>{102, 105, 108, 101});
  CHECK(shard_order(order, 0, 3, true) == std::vector<int64_t>{100, 103, 106});
  CHECK(shard_order(order, 2, 3, true) == std::vector<int64_t>{102, 105, 108});
  CHECK(shard_order(order, 0, 1, false) == order);
  // padding longer than the data repeats it
  CHECK(shard_order({7, 8}, 3, 5, false) == std::vector<int64_t>{8});
  CHECK(shard_order({7, 8}, 4, 5, false) == std::vector<int64_t>{7});
  CHECK(shard_order({7, 8}, 4, 5, true).empty());
}

TEST_CASE("together the ranks see each sample once an epoch, and as many each", "[distributed][sampler]") {
  for (int n : {1, 7, 64, 1000})
    for (int ranks : {1, 2, 3, 5, 8}) {
      INFO(n << " samples, " << ranks << " ranks");
      std::vector<int64_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::reverse(order.begin(), order.end());
      std::map<int64_t, int> seen;
      size_t per_rank = 0;
      for (int r = 0; r < ranks; ++r) {
        std::vector<int64_t> mine = shard_order(order, r, ranks, false);
        if (r == 0) per_rank = mine.size();
        CHECK(mine.size() == per_rank);
        for (int64_t s : mine) ++seen[s];
      }
      CHECK(seen.size() == static_cast<size_t>(n));
      int extra = 0;
      for (const auto& [s, count] : seen) extra += count - 1;
      CHECK(extra == static_cast<int>(per_rank * ranks) - n);  // only the padding repeats
    }
}
