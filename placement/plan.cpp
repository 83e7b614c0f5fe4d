#include "placement/plan.h"

#include <algorithm>

#include "core/memory_size.h"

namespace tandem {

bool DeviceInventory::has(Device d) const { return find(d) != nullptr; }

const DeviceInfo* DeviceInventory::find(Device d) const {
  auto it = std::find_if(devices.begin(), devices.end(), [&](const DeviceInfo& info) { return info.device == d; });
  return it == devices.end() ? nullptr : &*it;
}

std::vector<std::string> over_budget(const Plan& plan) {
  std::vector<std::string> lines;
  for (const DeviceEstimate& e : plan.estimates) {
    if (e.budget_bytes == 0 || e.peak_bytes <= e.budget_bytes) continue;
    const bool capacity = e.capacity_bytes != 0 && e.budget_bytes >= e.capacity_bytes;
    lines.push_back(e.device.str() + " is predicted to need " + format_bytes(e.peak_bytes) + " at its peak, but " +
                    (capacity ? "has " + format_bytes(e.capacity_bytes)
                              : "its budget (max_memory) is " + format_bytes(e.budget_bytes)));
  }
  return lines;
}

Plan plan_on_cpu(const Graph& graph) {
  Plan plan;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = graph.nodes[i];
    // the layer's own precision: no backend is asked here (place() asks the cpu's)
    OpStep step{static_cast<int>(i), Device::cpu(), "no device declared", 0, 0, {layer_precision(graph, node), {}}};
    if (node.device && node.device->kind != DeviceKind::cpu)
      step.reason = "declared " + node.device->str() + "; every layer on the cpu (--place '*=cpu', Model::to)";
    else if (node.device)
      step.reason = "declared cpu";
    for (int b = node.block; b >= 0; b = graph.blocks[b].parent)
      if (graph.blocks[b].data_parallel) {
        step.reason += "; data_parallel '" + graph.blocks[b].path + "' as one replica on the cpu";
        break;
      }
    plan.steps.push_back(std::move(step));
  }
  plan.policy = "cpu";
  return plan;
}

}  // namespace tandem
