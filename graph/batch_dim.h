// Which dimension of a graph input or target holds the batch. One rule for everything
// that feeds a model: the data's columns (data_columns), the layout a batch is moved to
// (to_model_layout), and gradient accumulation's micro-batches.
#pragma once

#include <optional>

#include "graph/symbolic.h"

namespace tandem {

/// The one symbolic dimension of `shape`: the batch, first ([batch, 64]) or not ([seq,
/// batch] of a sequence-first model). nullopt when the shape has no symbolic dimension or
/// several.
std::optional<int> batch_dim_of(const SymShape& shape);

}  // namespace tandem
