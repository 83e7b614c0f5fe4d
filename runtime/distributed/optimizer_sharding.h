// ZeRO stage 1 (torch's ZeroRedundancyOptimizer): each rank of a job keeps the optimizer
// state of, and updates, its own share of the parameters, about 1/N of their bytes; after
// each update every rank's share goes to the others. Every rank still holds every
// parameter and its averaged gradient, so the update is the same arithmetic on the same
// numbers as without sharding, to the bit: only the state's memory is divided (Adam's two
// moments per parameter: about (N - 1) / N of them saved on each rank).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "runtime/distributed/process_group.h"

namespace tandem {

class OptimizerSharding {
 public:
  /// Shares of `params` (the trained ones, in the trainer's order) for `group`'s ranks:
  /// each parameter, largest first, to the rank with the fewest bytes so far (the same
  /// choice on every rank). A parameter `shardable` says no to (a table whose gradient is
  /// rows, which only a stateless SGD updates, row by row) every rank updates itself.
  OptimizerSharding(ProcessGroup& group, const std::vector<Tensor>& params, const std::vector<bool>& shardable);

  /// The rank that updates params[i], or kEveryRank.
  int owner(size_t i) const { return owner_[i]; }
  static constexpr int kEveryRank = -1;
  /// The indices of the parameters this rank updates, ascending.
  const std::vector<size_t>& mine() const { return mine_; }

  /// After each rank updated its share: every rank's params take every owner's values
  /// (a broadcast from each rank of its share, packed).
  void share_parameters(const std::vector<Tensor>& params, const std::string& what);
  /// Every rank's optimizer state (tensors named by parameter, as Optimizer::state() gives
  /// them) on every rank: a checkpoint's whole state. "step" is each rank's alike.
  TensorMap gather_state(const TensorMap& mine, const std::string& what);

 private:
  ProcessGroup& group_;
  std::vector<int> owner_;
  std::vector<size_t> mine_;
};

}  // namespace tandem
