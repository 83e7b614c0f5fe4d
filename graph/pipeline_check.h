// What a pipelined step (`train: pipeline: {micro_batches: M}`, runtime/exec/pipeline.h)
// cannot cut: a layer whose result for one sample depends on the others of its batch. Batch
// norm in training normalises over the batch, so over micro-batches it would see each
// micro-batch's statistics and train another model. Inside a data_parallel block it already
// sees its replica's chunk (torch's DataParallel semantics), and a micro-batch changes only
// how large that chunk is, as a smaller batch would.
#pragma once

#include <string>

#include "graph/graph.h"

namespace tandem {

/// The first layer that micro-batches would change: a batch norm (batch_norm2d, ...) outside every
/// data_parallel block; null when there is none.
const Node* layer_refusing_micro_batches(const Graph& graph);

/// Why `node` refuses micro-batches, and what to do instead; `asked` names what asked for
/// them ("train: pipeline", "--micro-batches 4").
std::string micro_batch_refusal(const Node& node, const std::string& asked);

}  // namespace tandem
