// Which placed kernels are the replicas of one layer of a data-parallel block: the
// executors submit them with one TaskGroup, so that simulated GPUs run them side by side,
// as real GPUs would (a hint: backends/lane.h).
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/lane.h"
#include "graph/graph.h"

namespace tandem {

class ReplicaGroups {
 public:
  /// Notes that action `action` runs `node` on `lane` (call for every action with a
  /// kernel, before the first pass).
  void add(int action, const Node& node, const Lane* lane) {
    if (!node.replica || node.replica->kind != ReplicaRole::Kind::replica) return;
    // a replica is named "<the layer's path>@<replica>" (placement/replicate.cpp)
    const std::string layer = node.path.substr(0, node.path.rfind('@'));
    auto [it, added] = key_of_layer_.try_emplace(std::to_string(node.replica->block) + ":" + layer,
                                                 static_cast<int>(queues_.size()));
    if (added) queues_.emplace_back();
    if (key_of_action_.size() <= static_cast<size_t>(action)) key_of_action_.resize(action + 1, -1);
    key_of_action_[action] = it->second;
    std::vector<const Lane*>& queues = queues_[it->second];
    if (std::find(queues.begin(), queues.end(), lane) == queues.end()) queues.push_back(lane);
  }

  /// Forgets the groups of the last pass: a forward or a backward starts.
  void start_pass() { current_.assign(queues_.size(), nullptr); }

  /// The group `action`'s task joins in this pass; null when it has no siblings on other
  /// queues.
  std::shared_ptr<TaskGroup> group_of(int action) {
    if (static_cast<size_t>(action) >= key_of_action_.size() || key_of_action_[action] < 0) return nullptr;
    const int key = key_of_action_[action];
    const int size = static_cast<int>(queues_[key].size());
    if (size < 2) return nullptr;
    if (current_.size() != queues_.size()) current_.resize(queues_.size());
    if (!current_[key]) current_[key] = std::make_shared<TaskGroup>(size);
    return current_[key];
  }

 private:
  std::map<std::string, int> key_of_layer_;             // "<block>:<layer path>" -> key
  std::vector<int> key_of_action_;                      // action -> key, -1: not a replica
  std::vector<std::vector<const Lane*>> queues_;    // key -> the distinct queues of its replicas
  std::vector<std::shared_ptr<TaskGroup>> current_;     // key -> this pass's group
};

}  // namespace tandem
