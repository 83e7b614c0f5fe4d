// Which dimension of a graph input or target holds the batch. One rule for everything
// that feeds a model: the data's columns (data_columns), the layout a batch is moved to
// (to_model_layout), and gradient accumulation's micro-batches.
#pragma once

#include <optional>

#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/symbolic.h"

namespace tandem {

/// The one symbolic dimension of `shape`: the batch, first ([batch, 64]) or not ([seq,
/// batch] of a sequence-first model). nullopt when the shape has no symbolic dimension or
/// several.
std::optional<int> batch_dim_of(const SymShape& shape);

/// A note for each data_parallel block that scatters along a dimension other than the one
/// where its first input has the symbol `batch` (a sequence-first [T, batch] input with the
/// default dim 0): each replica then gets a part of every sample, not whole samples, as
/// nn.DataParallel would with that dim. Not an error (it may be meant), but `check` and
/// `plan` say it.
std::vector<std::string> scatter_dim_notes(const Graph& graph);

/// The value a data_parallel `block` scatters: the first tensor it reads from outside
/// itself; -1 when it reads none.
int scattered_input(const Graph& graph, const Block& block);

}  // namespace tandem
