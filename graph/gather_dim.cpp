#include "graph/gather_dim.h"

#include <algorithm>
#include <vector>

namespace tandem {

GatherDim gather_dim_of(const SymShape& output, const Dim& extent, int64_t scatter_dim) {
  const std::optional<std::string> symbol = extent.as_symbol();
  if (!symbol) return {};  // a fixed extent: decided from the replicas' shapes
  const std::string shape = sym_shape_str(output);
  std::vector<int64_t> follows;  // the dimensions that mention the symbol
  for (size_t d = 0; d < output.size(); ++d) {
    const std::vector<std::string> names = output[d].symbols();
    if (std::find(names.begin(), names.end(), *symbol) != names.end()) follows.push_back(static_cast<int64_t>(d));
  }
  if (follows.empty())
    return {std::nullopt, "it has no dimension that follows the scattered '" + *symbol + "' (its shape is " + shape +
                              "), so each replica's result is not its share of the whole, and concatenating them is not "
                              "what the block computes unwrapped; compute it outside the block"};
  if (follows.size() > 1)
    return {std::nullopt, "'" + *symbol + "' appears in several of its dimensions (" + shape +
                              "), and the replicas' outputs can be concatenated along one only; keep '" + *symbol +
                              "' in one dimension, or compute it outside the block"};
  const int64_t d = follows[0];
  if (output[d] == extent) return {d, ""};
  const std::optional<Dim> factor = output[d].divided_by(extent);
  // A fixed multiple of the batch: by sample, or in runs of the batch (a flatten across it,
  // [T, batch] to [T·batch]), which graph/sample_order.h tells apart and the gather undoes
  // run by run; samples mixed otherwise are refused there.
  if (factor && factor->is_constant()) return {d, ""};
  return {std::nullopt, "its dimension " + std::to_string(d) + " is " + output[d].str() + ", not '" + *symbol +
                            "' alone and not the scattered dim " + std::to_string(scatter_dim) +
                            ": the replicas' samples would interleave in it, and concatenating them would put rows "
                            "in another order than the block computes unwrapped; keep '" + *symbol +
                            "' in a dimension of its own (flatten from the batch's dimension, not across it)"};
}

}  // namespace tandem
