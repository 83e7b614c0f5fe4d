// Where a data_parallel block's output carries the batch, so that concatenating the
// replicas' outputs along that dimension gives the output of the block unwrapped.
//
// nn.DataParallel gathers along the dim it scattered along, whatever the output looks like;
// a block scattered along dim 1 (a sequence-first [T, batch, H] input) whose output holds
// the batch on dim 0 ([batch, classes] after its head) then concatenates the wrong rows or
// fails. Tandem gathers each output along the dimension that follows the scattered extent
// (`batch`), which is what the unwrapped block computes, and refuses at load time an output
// that has no such dimension (a reduction over the batch, a value that ignores the batch).
// The shape tells where the batch is, not in what order its samples lie there (a cat along
// the batch's dimension, a flatten across it): that is graph/sample_order.h's to follow,
// and the loader asks both; runs of the batch are gathered run by run
// (placement/replicate.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "graph/symbolic.h"

namespace tandem {

/// The verdict on one output: `dim` when decided; `why_not` when the output cannot be
/// gathered (a sentence for the user); neither when the scattered extent is a fixed size,
/// where only the replicas' concrete shapes can tell (placement/replicate.cpp).
struct GatherDim {
  std::optional<int64_t> dim;
  std::string why_not;
};

/// `output`: the output's shape as loaded; `extent`: the scattered dimension of the block's
/// first input (`batch`); `scatter_dim`: the block's dim, normalised. A dimension that is
/// the extent itself is the one; a multiple of it (32*batch, as flatten makes from [batch,
/// 32, H]) only at the scatter dim, where the batch is the outer factor as a flatten that
/// starts at the batch's dimension leaves it.
GatherDim gather_dim_of(const SymShape& output, const Dim& extent, int64_t scatter_dim);

}  // namespace tandem
