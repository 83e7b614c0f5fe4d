#include "graph/row_gradient_tables.h"

#include <map>

namespace tandem {

std::set<std::string> row_gradient_tables(const Graph& graph) {
  std::map<std::string, int> readers;
  std::set<std::string> sparse;
  for (const Node& node : graph.nodes) {
    for (const ParamSpec& p : node.params) ++readers[p.name];
    const bool table = node.op == "embedding" || node.op == "embedding_bag";
    if (table && node.attrs.has("sparse") && node.attrs.get_bool("sparse")) sparse.insert(node.params.at(0).name);
  }
  std::set<std::string> out;
  for (const std::string& name : sparse)
    if (readers[name] == 1) out.insert(name);
  return out;
}

}  // namespace tandem
