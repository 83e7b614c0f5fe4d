#include "runtime/exec/inference_regions.h"

#include <algorithm>

#include "runtime/exec/node_kernels.h"

namespace tandem {
namespace {

bool is_replica(const Node& node) { return node.replica && node.replica->kind == ReplicaRole::Kind::replica; }

}  // namespace

std::vector<InferenceRegion> find_inference_regions(const Graph& graph, const std::vector<Shape>& shapes,
                                                    const std::vector<ScheduleAction>& actions,
                                                    const PlanDevices& devices, size_t slot_count) {
  const int n = static_cast<int>(actions.size());
  // who reads each slot (actions in order), and which slots are the model's outputs
  std::vector<std::vector<int>> readers(slot_count);
  std::vector<bool> is_output(slot_count, false);
  for (int i = 0; i < n; ++i) {
    const ScheduleAction& a = actions[i];
    if (a.kind == ScheduleAction::Kind::copy) {
      readers[a.src_slot].push_back(i);
      continue;
    }
    for (int slot : a.in_slots) readers[slot].push_back(i);
  }
  std::vector<bool> output_value(graph.values.size(), false);
  for (const GraphOutput& out : graph.outputs) output_value[out.value] = true;
  for (const ScheduleAction& a : actions)
    if (a.kind == ScheduleAction::Kind::op && output_value[a.node->output]) is_output[a.out_slot] = true;

  std::vector<bool> candidate(n, false);
  for (int i = 0; i < n; ++i) {
    const ScheduleAction& a = actions[i];
    if (a.kind != ScheduleAction::Kind::op || a.node->schema->is_view || is_replica(*a.node)) continue;
    const KernelSpec spec = node_kernel_spec(graph, *a.node, shapes, a.params);
    candidate[i] = devices[a.device]->backend->fusable(spec);
  }
  // [first, last] is closed when what each layer but the last writes is read inside it alone
  auto closed = [&](int first, int last) {
    for (int k = first; k < last; ++k) {
      const int slot = actions[k].out_slot;
      if (is_output[slot]) return false;
      for (int r : readers[slot])
        if (r < first || r > last) return false;
    }
    return true;
  };

  std::vector<InferenceRegion> regions;
  for (int i = 0; i < n;) {
    if (!candidate[i]) {
      ++i;
      continue;
    }
    int run_end = i;  // the run of candidates on one device: [i, run_end]
    while (run_end + 1 < n && candidate[run_end + 1] && actions[run_end + 1].device == actions[i].device) ++run_end;
    for (int first = i; first < run_end;) {
      int last = run_end;
      while (last > first && !closed(first, last)) --last;
      if (last == first) {
        ++first;
        continue;
      }
      regions.push_back({first, last});
      first = last + 1;
    }
    i = run_end + 1;
  }
  return regions;
}

RegionSpec inference_region_spec(const Graph& graph, const std::vector<Shape>& shapes,
                                 const std::vector<ScheduleAction>& actions, const InferenceRegion& region,
                                 std::vector<int>& region_inputs) {
  RegionSpec spec;
  region_inputs.clear();
  std::vector<int> node_of_slot;  // slot -> node index inside the region, or -1
  auto produced_at = [&](int slot) {
    return slot < static_cast<int>(node_of_slot.size()) ? node_of_slot[slot] : -1;
  };
  size_t params = 0;
  for (int k = region.first; k <= region.last; ++k) {
    const ScheduleAction& a = actions[k];
    RegionNode node;
    node.spec = node_kernel_spec(graph, *a.node, shapes, a.params);
    node.first_param = params;
    params += a.params.size();
    for (size_t j = 0; j < a.in_slots.size(); ++j) {
      const int slot = a.in_slots[j];
      if (const int producer = produced_at(slot); producer >= 0) {
        node.inputs.push_back(~producer);
        continue;
      }
      auto it = std::find(region_inputs.begin(), region_inputs.end(), slot);
      if (it == region_inputs.end()) {
        const int value = a.node->inputs[j];
        region_inputs.push_back(slot);
        spec.inputs.push_back({shapes[value], graph.values[value].type.dtype});
        it = region_inputs.end() - 1;
      }
      node.inputs.push_back(static_cast<int>(it - region_inputs.begin()));
    }
    if (node_of_slot.size() <= static_cast<size_t>(a.out_slot)) node_of_slot.resize(a.out_slot + 1, -1);
    node_of_slot[a.out_slot] = static_cast<int>(spec.nodes.size());
    spec.nodes.push_back(std::move(node));
  }
  return spec;
}

}  // namespace tandem
