#include "graph/graph.h"

#include <algorithm>

namespace tandem {

int64_t Graph::parameter_count() const {
  int64_t total = 0;
  for (const Node& node : nodes)
    for (const ParamSpec& p : node.params)
      if (p.trainable) total += shape_numel(p.shape);  // as torch's sum(p.numel() for p in parameters())
  return total;
}

std::vector<ParamSpec> Graph::parameters() const {
  std::vector<ParamSpec> all;
  for (const Node& node : nodes) all.insert(all.end(), node.params.begin(), node.params.end());
  return all;
}

std::vector<std::string> Graph::symbols() const {
  std::vector<std::string> names;
  for (const GraphInput& input : inputs)
    for (const Dim& d : values[input.value].type.shape)
      for (const std::string& s : d.symbols())
        if (std::find(names.begin(), names.end(), s) == names.end()) names.push_back(s);
  return names;
}

}  // namespace tandem
