#include "runtime/exec/liveness.h"

#include <algorithm>
#include <map>

namespace tandem {

std::vector<bool> values_requiring_grad(const Graph& graph, const Schedule& schedule, bool input_grads) {
  std::vector<bool> needs_grad(graph.values.size(), false);
  if (input_grads)
    for (const GraphInput& in : graph.inputs) needs_grad[in.value] = graph.values[in.value].type.dtype == DType::float32;
  for (int index : schedule.step_action) {
    const Node& node = *schedule.actions[index].node;
    bool needs = any_trainable(node.params);
    for (int v : node.inputs) needs = needs || needs_grad[v];
    needs_grad[node.output] = needs && graph.values[node.output].type.dtype == DType::float32;
  }
  return needs_grad;
}

std::vector<int> last_forward_readers(const Schedule& schedule) {
  std::vector<int> last(schedule.slot_keys.size(), -1);
  for (size_t i = 0; i < schedule.actions.size(); ++i) {
    const ScheduleAction& a = schedule.actions[i];
    if (a.kind == ScheduleAction::Kind::copy) {
      last[a.src_slot] = static_cast<int>(i);
      last[a.dst_slot] = static_cast<int>(i);
      continue;
    }
    last[a.out_slot] = static_cast<int>(i);
    for (int slot : a.in_slots) last[slot] = static_cast<int>(i);
  }
  return last;
}

std::vector<std::vector<int>> release_after_forward(const Graph& graph, const Schedule& schedule,
                                                    const std::vector<int>& kept_slots) {
  const size_t n_slots = schedule.slot_keys.size();
  std::vector<bool> read_in_backward(n_slots, false);
  for (int slot : kept_slots)
    if (slot >= 0) read_in_backward[slot] = true;
  for (const GraphOutput& out : graph.outputs)  // where they are produced
    if (schedule.home_slot[out.value] >= 0) read_in_backward[schedule.home_slot[out.value]] = true;
  for (const ScheduleAction& a : schedule.actions) {
    if (a.kind != ScheduleAction::Kind::op || !a.kernel) continue;
    for (size_t k = 0; k < a.in_slots.size(); ++k)
      if (a.kernel->backward_reads_input(k)) read_in_backward[a.in_slots[k]] = true;
    if (a.kernel->backward_reads_output()) read_in_backward[a.out_slot] = true;
  }
  const std::vector<int> last = last_forward_readers(schedule);
  std::vector<std::vector<int>> release(schedule.actions.size());
  for (size_t slot = 0; slot < n_slots; ++slot)
    if (!read_in_backward[slot] && last[slot] >= 0) release[last[slot]].push_back(static_cast<int>(slot));
  return release;
}

std::vector<std::vector<ParameterKey>> gradients_complete_after(const Schedule& schedule,
                                                                 const std::vector<ParameterKey>& keys) {
  std::map<ParameterKey, bool> wanted;
  for (const ParameterKey& key : keys) wanted[key] = true;
  std::vector<std::vector<ParameterKey>> complete(schedule.step_action.size());
  for (size_t i = 0; i < schedule.step_action.size(); ++i) {
    const ScheduleAction& a = schedule.actions[schedule.step_action[i]];
    const Device device = schedule.devices[a.device]->device;
    for (const ParamSpec& p : a.node->params) {
      auto it = wanted.find(ParameterKey{p.name, device});
      if (it == wanted.end() || !it->second) continue;
      it->second = false;  // the first step that uses it, in forward order
      complete[i].push_back(it->first);
    }
  }
  return complete;
}

}  // namespace tandem
