// In what order the values a data_parallel block makes hold the samples of the batch it
// scatters, so that the gather can be trusted to undo the scatter.
//
// Gathering concatenates the replicas' outputs along the dimension that carries the batch
// (graph/gather_dim.h). That is the block's unwrapped output only when, in that dimension,
// the batch is the outermost index: sample b's rows come before sample b+1's, whatever
// they hold (a flatten of [batch, 32, H] from dim 0 keeps it so). A shape says how big a
// dimension is, not in what order: `cat([a, b], dim=0)` of two [batch, 8] values makes
// [2*batch, 8] just as a flatten of [batch, 2, 8] does, but its rows are all of a's samples,
// then all of b's, and the replicas' outputs concatenated would put replica 0's a and b
// before replica 1's. So the order is followed layer by layer, as torch's strides would
// tell: each value's batch dimension holds `outer` runs of the batch one after another
// (1: ordered by sample), or the samples were mixed across dimensions by a reshape.
#pragma once

#include <map>
#include <string>

#include "graph/graph.h"
#include "graph/symbolic.h"

namespace tandem {

/// The order of the batch's samples in one value of a data_parallel block.
struct SampleOrder {
  enum class Kind {
    none,      // the value holds no part of the scattered dimension (a weight, a narrow of it)
    runs,      // its one batch dimension holds `runs` copies of the batch's order, one after another
    mixed,     // a layer mixed samples across dimensions or orders; `why` says which
    unknown,   // a fixed extent whose layers could not be followed with it as a symbol
  } kind = Kind::none;
  Dim runs = 1;
  std::string why;
};

/// The order of the samples in each value made inside data_parallel `block`, which scatters
/// its inputs along `scatter_dim` (normalised), keyed by value id. With a fixed extent (x:
/// [8, 16]) the block's layers are inferred again with a symbol in its place, so that the
/// batch can be told from a dimension that happens to have its size.
std::map<int, SampleOrder> sample_orders(const Graph& graph, const Block& block, int64_t scatter_dim);

/// Why output `value` of the block cannot be gathered by concatenating the replicas' outputs
/// (its samples are in runs, or mixed); empty when it can, or when only the replicas'
/// shapes can tell.
std::string sample_order_problem(const Graph& graph, const std::map<int, SampleOrder>& orders, int value);

}  // namespace tandem
