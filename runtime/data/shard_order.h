// One rank's share of an epoch's samples, as torch.utils.data.DistributedSampler makes it:
// the epoch's order of every sample (shuffled by seed and epoch, or 0..n-1), cut to a
// multiple of the ranks (drop_last) or padded to one by repeating its start, then every
// `ranks`-th sample from `rank`. Every rank computes the same order, so together they see
// each sample of an epoch once (padding aside).
#pragma once

#include <cstdint>
#include <vector>

namespace tandem {

std::vector<int64_t> shard_order(const std::vector<int64_t>& order, int rank, int ranks, bool drop_last);

}  // namespace tandem
