#include "runtime/distributed/optimizer_sharding.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "runtime/distributed/broadcast_tensors.h"

namespace tandem {

OptimizerSharding::OptimizerSharding(ProcessGroup& group, const std::vector<Tensor>& params,
                                     const std::vector<bool>& shardable)
    : group_(group), owner_(params.size(), kEveryRank) {
  // Largest first, each to the lightest rank so far (ties: the lower rank): shares within
  // one parameter's size of each other.
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto bytes = [&](size_t i) { return params[i].defined() ? params[i].nbytes() : size_t{0}; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes(a) > bytes(b); });
  std::vector<size_t> load(static_cast<size_t>(group_.size()), 0);
  for (size_t i : order) {
    if (!shardable[i]) continue;
    const auto lightest = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner_[i] = lightest;
    load[static_cast<size_t>(lightest)] += bytes(i);
  }
  for (size_t i = 0; i < params.size(); ++i)
    if (owner_[i] == group_.rank() || owner_[i] == kEveryRank) mine_.push_back(i);
}

void OptimizerSharding::share_parameters(const std::vector<Tensor>& params, const std::string& what) {
  // one broadcast per rank: its share, packed in order
  std::vector<char> packed;
  for (int root = 0; root < group_.size(); ++root) {
    size_t total = 0;
    for (size_t i = 0; i < params.size(); ++i)
      if (owner_[i] == root) total += params[i].nbytes();
    if (total == 0) continue;
    packed.resize(total);
    size_t at = 0;
    if (root == group_.rank())
      for (size_t i : mine_) {
        if (owner_[i] != root) continue;
        std::memcpy(packed.data() + at, params[i].raw_data(), params[i].nbytes());
        at += params[i].nbytes();
      }
    group_.broadcast(packed.data(), total, root, what + " (rank " + std::to_string(root) + "'s share)");
    if (root == group_.rank()) continue;
    at = 0;
    for (size_t i = 0; i < params.size(); ++i)
      if (owner_[i] == root) {
        std::memcpy(params[i].raw_data(), packed.data() + at, params[i].nbytes());
        at += params[i].nbytes();
      }
  }
}

TensorMap OptimizerSharding::gather_state(const TensorMap& mine, const std::string& what) {
  TensorMap all;
  for (int root = 0; root < group_.size(); ++root) {
    TensorMap share = root == group_.rank() ? mine : TensorMap{};
    broadcast_tensors(group_, share, root, what + " (rank " + std::to_string(root) + "'s share)");
    for (auto& [name, t] : share) all.emplace(name, t);  // "step" is the same on every rank: the first kept
  }
  return all;
}

}  // namespace tandem
