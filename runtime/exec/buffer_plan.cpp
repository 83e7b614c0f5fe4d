#include "runtime/exec/buffer_plan.h"

#include <algorithm>

namespace tandem {

BufferPlan plan_buffers(const Graph& graph, const Schedule& schedule, const std::vector<Shape>& shapes,
                        const std::vector<int>& escaping) {
  const size_t n_slots = schedule.slot_keys.size();
  const auto& actions = schedule.actions;
  // A view's storage is its input's: follow views back to the slot that owns storage.
  std::vector<int> root(n_slots);
  for (size_t s = 0; s < n_slots; ++s) root[s] = static_cast<int>(s);
  for (const ScheduleAction& a : actions)
    if (a.is_view()) root[a.out_slot] = root[a.in_slots[0]];

  // Which roots may live in a buffer: written by a kernel, read only by layers of its own
  // device, not leaving the pass, not in a GPU's host memory.
  std::vector<bool> local(n_slots, false);
  for (const ScheduleAction& a : actions)
    if (a.kind == ScheduleAction::Kind::op && a.kernel)
      local[a.out_slot] = schedule.host_memory_of[a.out_slot] < 0;
  for (int slot : escaping) local[root[slot]] = false;
  for (const ScheduleAction& a : actions) {
    if (a.kind == ScheduleAction::Kind::copy) {
      local[root[a.src_slot]] = false;
      continue;
    }
    for (int slot : a.in_slots)
      if (schedule.slot_keys[root[slot]].second != a.device) local[root[slot]] = false;
  }
  std::vector<int> last_use(n_slots, -1);
  for (size_t i = 0; i < actions.size(); ++i) {
    const ScheduleAction& a = actions[i];
    if (a.kind != ScheduleAction::Kind::op) continue;
    for (int slot : a.in_slots) last_use[root[slot]] = std::max(last_use[root[slot]], static_cast<int>(i));
    last_use[root[a.out_slot]] = std::max(last_use[root[a.out_slot]], static_cast<int>(i));
  }

  BufferPlan plan;
  plan.buffer_of_slot.assign(n_slots, -1);
  std::vector<int> held(n_slots, -1);              // root -> the buffer it holds now
  std::vector<std::vector<int>> free(schedule.devices.size());  // per device: free buffers
  for (size_t i = 0; i < actions.size(); ++i) {
    const ScheduleAction& a = actions[i];
    if (a.kind != ScheduleAction::Kind::op) continue;
    const int out = a.out_slot;
    if (a.kernel && local[out]) {
      const int value = schedule.slot_keys[out].first;
      const size_t need = static_cast<size_t>(shape_numel(shapes[value])) * dtype_size(graph.values[value].type.dtype);
      std::vector<int>& candidates = free[a.device];
      int best = -1;
      for (int b : candidates)
        if (plan.buffers[b].bytes >= need && (best < 0 || plan.buffers[b].bytes < plan.buffers[best].bytes)) best = b;
      if (best < 0 && !candidates.empty()) {
        best = *std::max_element(candidates.begin(), candidates.end(),
                                 [&](int x, int y) { return plan.buffers[x].bytes < plan.buffers[y].bytes; });
        plan.buffers[best].bytes = need;
        plan.buffers[best].sized_by = static_cast<int>(i);
      }
      if (best < 0) {
        plan.buffers.push_back({a.device, need, static_cast<int>(i)});
        best = static_cast<int>(plan.buffers.size()) - 1;
      } else {
        candidates.erase(std::find(candidates.begin(), candidates.end(), best));
      }
      plan.buffer_of_slot[out] = held[out] = best;
    }
    // what this action read (or wrote, if nobody reads it) for the last time goes back
    auto release = [&](int slot) {
      const int r = root[slot];
      if (last_use[r] == static_cast<int>(i) && held[r] >= 0) {
        free[plan.buffers[held[r]].device].push_back(held[r]);
        held[r] = -1;
      }
    };
    for (int slot : a.in_slots) release(slot);
    release(out);
  }
  return plan;
}

}  // namespace tandem
