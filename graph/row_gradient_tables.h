// Which tables keep their gradient as rows (core/touched_rows.h, Note [row gradient]): the
// weights of `sparse: true` embedding and embedding_bag layers that no other layer reads.
// One rule for the model that holds the gradients (runtime/model.cpp) and the plan that
// predicts their memory (placement/estimate.cpp).
#pragma once

#include <set>
#include <string>

#include "graph/graph.h"

namespace tandem {

/// The parameter names of the row-gradient tables of `graph`. A table another op also
/// reads (a tied output projection) needs a dense gradient, which torch's sparse flag
/// cannot give either.
std::set<std::string> row_gradient_tables(const Graph& graph);

}  // namespace tandem
