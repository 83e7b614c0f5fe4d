#include "placement/plan_dot.h"

#include <map>
#include <sstream>

#include "core/memory_size.h"

namespace tandem {
namespace {

const char* colour_of(Device d) {
  static const char* gpu_colours[] = {"palegreen", "lightskyblue", "plum", "khaki", "lightsalmon", "aquamarine",
                                      "thistle", "wheat"};
  if (d.kind == DeviceKind::cpu) return "lightgrey";
  return gpu_colours[d.index % 8];
}

std::string quote(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '\n') {
      q += "\\n";
      continue;
    }
    if (c == '"' || c == '\\') q += '\\';
    q += c;
  }
  return q + "\"";
}

std::string value_node(const Graph& g, int value) {
  const Value& v = g.values[value];
  return v.producer >= 0 ? quote("layer:" + g.nodes[v.producer].path) : quote("input:" + v.name);
}

}  // namespace

std::string plan_to_dot(const Graph& given, const Plan& plan) {
  const Graph& g = executed_graph(plan, given);  // with data_parallel replicas
  std::ostringstream out;
  out << "digraph " << quote(g.name) << " {\n  rankdir=TB;\n  node [shape=box, style=filled];\n";
  std::map<Device, std::vector<int>> by_device;  // device -> step indices
  for (size_t i = 0; i < plan.steps.size(); ++i) by_device[plan.steps[i].device].push_back(static_cast<int>(i));
  by_device[Device::cpu()];  // inputs and gathered outputs live there
  for (const auto& [device, steps] : by_device) {
    out << "  subgraph " << quote("cluster_" + device.str()) << " {\n    label=" << quote(device.str())
        << "; style=rounded; color=" << colour_of(device) << ";\n";
    if (device == Device::cpu()) {
      for (const GraphInput& in : g.inputs)
        out << "    " << quote("input:" + in.name) << " [label=" << quote(in.name) << ", shape=ellipse, fillcolor=white];\n";
      if (!g.outputs.empty()) out << "    \"outputs\" [shape=ellipse, fillcolor=white];\n";
    }
    for (int i : steps) {
      const Node& n = g.nodes[plan.steps[i].node];
      out << "    " << quote("layer:" + n.path) << " [label=" << quote(n.path + "\n" + n.op)
          << ", fillcolor=" << colour_of(device) << ", tooltip=" << quote(plan.steps[i].reason) << "];\n";
    }
    out << "  }\n";
  }
  // Edges: plain within a device; a dashed, labelled edge where a forward copy moves the value.
  std::map<std::pair<int, Device>, const CopyStep*> copies;
  for (const CopyStep& c : plan.copies)
    if (c.forward) copies[{c.value, c.to}] = &c;
  for (const OpStep& s : plan.steps) {
    const Node& n = g.nodes[s.node];
    for (int in : n.inputs) {
      out << "  " << value_node(g, in) << " -> " << quote("layer:" + n.path);
      auto it = copies.find({in, s.device});
      if (it != copies.end())
        out << " [style=dashed, color=red, label=" << quote("copy " + format_bytes(it->second->bytes)) << "]";
      out << ";\n";
    }
  }
  for (const GraphOutput& o : g.outputs) {
    out << "  " << value_node(g, o.value) << " -> \"outputs\"";
    auto it = copies.find({o.value, Device::cpu()});
    if (it != copies.end())
      out << " [style=dashed, color=red, label=" << quote("copy " + format_bytes(it->second->bytes)) << "]";
    out << ";\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace tandem
