#include "runtime/exec/schedule.h"

#include "core/error.h"
#include "runtime/exec/inference_regions.h"
#include "runtime/exec/node_kernels.h"

namespace tandem {

Schedule::Schedule(const Graph& graph, const Plan& plan, const std::vector<Shape>& shapes,
                   DeviceRegistry& registry, bool trailing_copies, const ParameterSource& parameter, bool regions)
    : devices(open_plan_devices(plan, registry)), slots_(graph, devices, slot_keys) {
  auto device_index = [&](Device d) { return plan_device_index(devices, d); };
  home_slot.assign(graph.values.size(), -1);
  for (const GraphInput& in : graph.inputs) input_slots.push_back(home_slot[in.value] = slots_.add(in.value, 0));

  const size_t end = plan.steps.size();
  step_action.assign(end, -1);
  copies_before.resize(end + 1);
  size_t next_copy = 0;
  for (size_t i = 0; i <= end; ++i) {
    for (; next_copy < plan.copies.size() && plan.copies[next_copy].forward &&
           plan.copies[next_copy].before_step == static_cast<int>(i);
         ++next_copy) {
      if (i == end && !trailing_copies) continue;
      const CopyStep& c = plan.copies[next_copy];
      ScheduleAction a;
      a.kind = ScheduleAction::Kind::copy;
      a.from_device = device_index(c.from);
      a.device = device_index(c.to);
      a.context = i < end ? layer_context(graph.nodes[plan.steps[i].node])
                          : "gathering output '" + graph.values[c.value].name + "' to the cpu";
      a.src_slot = slots_.find(c.value, a.from_device, "the copy to " + c.to.str());
      a.dst_slot = slots_.add(c.value, a.device);
      copies_before[i].push_back(static_cast<int>(actions.size()));
      actions.push_back(std::move(a));
    }
    if (i == end) break;
    const OpStep& s = plan.steps[i];
    const Node& node = graph.nodes[s.node];
    ScheduleAction a;
    a.step = static_cast<int>(i);
    a.node = &node;
    a.device = device_index(s.device);
    a.context = layer_context(node);
    for (const ParamSpec& p : node.params) a.params.push_back(parameter(p, s.device, a.context));
    for (int v : node.inputs) a.in_slots.push_back(slots_.find(v, a.device, a.context));
    a.out_slot = home_slot[node.output] = slots_.add(node.output, a.device);
    step_action[i] = static_cast<int>(actions.size());
    actions.push_back(std::move(a));
  }
  TANDEM_ASSERT(next_copy == plan.copies.size() || !plan.copies[next_copy].forward,
                "a forward copy of the plan is out of order");

  make_kernels(graph, shapes, regions);
  choose_host_memory();
}

void Schedule::make_kernels(const Graph& graph, const std::vector<Shape>& shapes, bool regions) {
  if (regions) {
    for (const InferenceRegion& r : find_inference_regions(graph, shapes, actions, devices, slot_keys.size())) {
      std::vector<int> inputs;
      const RegionSpec spec = inference_region_spec(graph, shapes, actions, r, inputs);
      ScheduleAction& last = actions[r.last];
      std::unique_ptr<Kernel> kernel = devices[last.device]->backend->make_region_kernel(spec);
      if (!kernel) continue;
      std::vector<Tensor> params;
      for (int k = r.first; k <= r.last; ++k) {
        ScheduleAction& a = actions[k];
        params.insert(params.end(), a.params.begin(), a.params.end());
        if (k == r.last) break;
        a.fused_away = true;
        a.in_slots.clear();  // nothing runs, nothing is read: its output's buffer is free at once
      }
      last.kernel = std::move(kernel);
      last.params = std::move(params);
      last.in_slots = std::move(inputs);
      last.region_size = r.last - r.first + 1;
      last.context = "layers '" + actions[r.first].node->path + "' to '" + last.node->path + "' (" +
                     std::to_string(last.region_size) + " layers fused)";
    }
  }
  for (size_t i = 0; i < actions.size(); ++i) {
    ScheduleAction& a = actions[i];
    if (a.kind != ScheduleAction::Kind::op || a.node->schema->is_view || a.fused_away || a.kernel) continue;
    Backend& backend = *devices[a.device]->backend;
    a.kernel = make_node_kernel([&](const KernelSpec& spec) { return backend.make_kernel(spec); },
                                devices[a.device]->device, graph, *a.node, shapes, a.params);
    replica_groups.add(static_cast<int>(i), *a.node, devices[a.device]->compute);
  }
}

void Schedule::choose_host_memory() {
  host_memory_of.assign(slot_keys.size(), -1);
  std::vector<int> view_of(slot_keys.size(), -1);  // a view's slot -> the slot whose storage it shares
  for (const ScheduleAction& a : actions)
    if (a.is_view()) view_of[a.out_slot] = a.in_slots.at(0);
  auto storage_slot = [&](int slot) {
    while (view_of[slot] >= 0) slot = view_of[slot];
    return slot;
  };
  auto is_host = [&](int device) { return devices[device]->device == Device::cpu(); };
  for (const ScheduleAction& a : actions) {
    if (a.kind != ScheduleAction::Kind::copy || is_host(a.from_device) == is_host(a.device)) continue;
    int& peer = host_memory_of[is_host(a.from_device) ? storage_slot(a.src_slot) : a.dst_slot];
    if (peer < 0) peer = is_host(a.from_device) ? a.device : a.from_device;  // the first GPU wins
  }
}

Allocator& Schedule::allocator_for(int slot, int device) const {
  const int peer = slot >= 0 && static_cast<size_t>(slot) < host_memory_of.size() ? host_memory_of[slot] : -1;
  if (peer >= 0 && devices[device]->device == Device::cpu()) return devices[peer]->backend->host_allocator();
  return devices[device]->backend->allocator();
}

}  // namespace tandem
