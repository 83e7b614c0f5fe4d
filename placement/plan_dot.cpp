#include "placement/plan_dot.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>
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

std::string copy_label(const std::string& what, size_t bytes) { return what + " " + format_bytes(bytes); }

}  // namespace

std::string plan_to_dot(const Graph& given, const Plan& plan) {
  const Graph& g = executed_graph(plan, given);  // with data_parallel replicas
  std::vector<Device> home(g.values.size(), Device::cpu());  // as partition.cpp: the producer's device
  for (const OpStep& s : plan.steps) home[g.nodes[s.node].output] = s.device;
  // A training plan draws the loss where it runs (each replica's with a parallel loss), the
  // targets on the cpu, and the backward copies of gradients; its outputs are not gathered.
  const bool scored = plan.training && g.loss;
  std::vector<std::pair<int, Device>> losses;  // (the value it scores, its device)
  if (scored && g.parallel_loss)
    for (const ParallelLoss::Part& part : g.parallel_loss->parts) losses.emplace_back(part.value, home[part.value]);
  else if (scored)
    losses.emplace_back(g.loss->input, home[g.loss->input]);
  auto loss_node = [](Device d) { return quote("loss:" + d.str()); };
  std::ostringstream out;
  out << "digraph " << quote(g.name) << " {\n  rankdir=TB;\n  node [shape=box, style=filled];\n";
  std::map<Device, std::vector<int>> by_device;  // device -> step indices
  for (size_t i = 0; i < plan.steps.size(); ++i) by_device[plan.steps[i].device].push_back(static_cast<int>(i));
  by_device[Device::cpu()];  // inputs and gathered outputs live there
  for (const auto& [value, device] : losses) by_device[device];
  for (const auto& [device, steps] : by_device) {
    out << "  subgraph " << quote("cluster_" + device.str()) << " {\n    label=" << quote(device.str())
        << "; style=rounded; color=" << colour_of(device) << ";\n";
    if (device == Device::cpu()) {
      for (const GraphInput& in : g.inputs)
        out << "    " << quote("input:" + in.name) << " [label=" << quote(in.name) << ", shape=ellipse, fillcolor=white];\n";
      if (scored)
        for (const GraphInput& t : g.targets)
          out << "    " << quote("input:" + t.name) << " [label=" << quote("target " + t.name)
              << ", shape=ellipse, fillcolor=white];\n";
      else if (!g.outputs.empty())
        out << "    \"outputs\" [shape=ellipse, fillcolor=white];\n";
    }
    for (const auto& [value, loss_device] : losses)
      if (loss_device == device)
        out << "    " << loss_node(device) << " [label=" << quote("loss\n" + g.loss->op) << ", shape=octagon, fillcolor="
            << colour_of(device) << "];\n";
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
    if (scored) break;
    out << "  " << value_node(g, o.value) << " -> \"outputs\"";
    auto it = copies.find({o.value, Device::cpu()});
    if (it != copies.end())
      out << " [style=dashed, color=red, label=" << quote("copy " + format_bytes(it->second->bytes)) << "]";
    out << ";\n";
  }
  for (const auto& [value, device] : losses) {
    out << "  " << value_node(g, value) << " -> " << loss_node(device) << ";\n";
    out << "  " << quote("input:" + g.values[g.loss->target].name) << " -> " << loss_node(device);
    for (const CopyStep& c : plan.copies)  // a parallel loss's replicas get their rows: one copy each
      if (c.forward && c.value == g.loss->target && c.to == device) {
        out << " [style=dashed, color=red, label=" << quote(copy_label("copy", c.bytes)) << "]";
        break;
      }
    out << ";\n";
  }
  // A backward copy takes a gradient from the reader's device back to the value's home:
  // drawn from the first layer that read it there (or the loss) to the value's producer.
  for (const CopyStep& c : plan.copies) {
    if (c.forward) continue;
    std::string reader;
    for (const OpStep& s : plan.steps) {
      const Node& n = g.nodes[s.node];
      if (s.device == c.from && std::find(n.inputs.begin(), n.inputs.end(), c.value) != n.inputs.end()) {
        reader = quote("layer:" + n.path);
        break;
      }
    }
    if (reader.empty()) reader = loss_node(c.from);
    out << "  " << reader << " -> " << value_node(g, c.value) << " [style=dashed, color=blue, constraint=false, label="
        << quote(copy_label("gradient", c.bytes)) << "];\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace tandem
