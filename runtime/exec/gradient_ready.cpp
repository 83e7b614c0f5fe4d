#include "runtime/exec/gradient_ready.h"

#include <algorithm>
#include <set>

namespace tandem {

std::vector<std::string> gradient_completion_order(const Graph& graph) {
  std::vector<std::vector<std::string>> first_used_by(graph.nodes.size());
  std::set<std::string> seen;
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    for (const ParamSpec& p : graph.nodes[i].params)
      if (p.trainable && seen.insert(p.name).second) first_used_by[i].push_back(p.name);
  std::vector<std::string> order;
  for (size_t i = graph.nodes.size(); i-- > 0;)
    order.insert(order.end(), first_used_by[i].begin(), first_used_by[i].end());
  return order;
}

}  // namespace tandem
