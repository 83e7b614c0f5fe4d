#include "graph/loss_reach.h"

#include "core/error.h"

namespace tandem {
namespace {

// Which nodes the loss's gradient flows into, walking back from its input.
std::vector<bool> nodes_reached(const Graph& graph) {
  std::vector<bool> value_reached(graph.values.size(), false), node_reached(graph.nodes.size(), false);
  if (!graph.loss) return node_reached;
  const int input = graph.loss->input;
  value_reached[input] = graph.values[input].type.dtype == DType::float32;
  // nodes are in topological order: a reader comes after what it reads
  for (size_t n = graph.nodes.size(); n-- > 0;) {
    const Node& node = graph.nodes[n];
    if (!value_reached[node.output]) continue;
    node_reached[n] = true;
    for (int v : node.inputs)
      if (graph.values[v].type.dtype == DType::float32) value_reached[v] = true;
  }
  return node_reached;
}

std::string listed(const std::vector<std::string>& names, size_t at_most = 8) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < at_most; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > at_most) s += " and " + std::to_string(names.size() - at_most) + " more";
  return s;
}

}  // namespace

std::vector<std::string> parameters_the_loss_reaches(const Graph& graph) {
  const std::vector<bool> reached = nodes_reached(graph);
  std::vector<std::string> names;
  for (size_t n = 0; n < graph.nodes.size(); ++n)
    if (reached[n])
      for (const ParamSpec& p : graph.nodes[n].params)
        if (p.trainable) names.push_back(p.name);
  return names;
}

void check_loss_reaches_parameters(const Graph& graph) {
  if (!graph.loss || !parameters_the_loss_reaches(graph).empty()) return;
  const LossSpec& loss = *graph.loss;
  const Value& scored = graph.values[loss.input];
  const std::string what = "model '" + graph.name + "' has nothing to train: its loss (" + loss.op + " of '" +
                           scored.name + "') ";
  std::vector<std::string> untrained;
  for (const Node& node : graph.nodes)
    for (const ParamSpec& p : node.params)
      if (p.trainable) untrained.push_back(p.name);
  if (untrained.empty())
    throw UserError(what + "depends on no parameter, and the model has none. Add a layer with parameters (such as "
                           "linear) before the tensor the loss scores");
  const std::string source = scored.producer < 0 ? "graph input '" + scored.name + "'"
                                                 : "'" + scored.name + "', which is not computed from them";
  throw UserError(what + "reaches no parameter: " + listed(untrained) + " would get no gradient, since the loss scores " +
                  source + ". Point loss: input: at a layer computed from the parameters (such as the model's last)");
}

}  // namespace tandem
