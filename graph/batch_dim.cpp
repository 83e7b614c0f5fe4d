#include "graph/batch_dim.h"

namespace tandem {

std::optional<int> batch_dim_of(const SymShape& shape) {
  std::optional<int> found;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d].is_constant()) continue;
    if (found) return std::nullopt;
    found = static_cast<int>(d);
  }
  return found;
}

int scattered_input(const Graph& g, const Block& block) {
  for (int n = block.first_node; n < block.end_node; ++n)
    for (int v : g.nodes[n].inputs)
      if (g.values[v].producer < block.first_node || g.values[v].producer >= block.end_node) return v;
  return -1;
}

std::vector<std::string> scatter_dim_notes(const Graph& g) {
  std::vector<std::string> notes;
  for (const Block& block : g.blocks) {
    if (!block.data_parallel) continue;
    const int input = scattered_input(g, block);
    if (input < 0) continue;
    const SymShape& shape = g.values[input].type.shape;
    const int64_t rank = static_cast<int64_t>(shape.size());
    const int64_t dim = block.data_parallel->dim < 0 ? block.data_parallel->dim + rank : block.data_parallel->dim;
    if (dim < 0 || dim >= rank) continue;
    std::optional<int64_t> batch;
    for (int64_t d = 0; d < rank; ++d)
      if (shape[d] == Dim::symbol("batch")) batch = d;
    if (!batch || *batch == dim) continue;
    notes.push_back("data_parallel block '" + block.path + "' scatters '" + g.values[input].name + "' " +
                    sym_shape_str(shape) + " along dim " + std::to_string(dim) + " (" + shape[dim].str() +
                    "), not along its batch (dim " + std::to_string(*batch) +
                    "): each replica gets a part of every sample, not whole samples; set dim: " +
                    std::to_string(*batch) + " to split the batch");
  }
  return notes;
}

}  // namespace tandem
