// Fixed chunk_sizes against the batches a training run will feed, checked before its first
// step. chunk_sizes must add up to the batch being scattered; a run sees full batches, an
// epoch's short last batch (unless drop_last), gradient accumulation's micro-batches and
// validation's batches, and a batch that the sizes do not fit would otherwise stop the run
// late: after a whole epoch, in validation. Tandem does not resize the chunks in
// proportion: the user chose them, so it refuses and says which batch and what to do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tandem {

/// A batch size a run will feed the model and where it comes from ("the last training
/// batch of each epoch (1000 samples in batches of 64)").
struct PlannedBatch {
  int64_t size = 0;
  std::string what;
};

/// The batches the model sees for `samples` samples in batches of `batch`, each step's
/// batch cut into `accumulate` micro-batches (runtime/micro_batches.h), the short last one
/// kept unless `drop_last`; `what` names the data ("training", "validation").
std::vector<PlannedBatch> planned_batches(int64_t samples, int64_t batch, int64_t accumulate, bool drop_last,
                                          const std::string& what);

/// UserError naming the block and the batch when a data_parallel block of `graph` with
/// chunk_sizes scatters the batch (its first input has the symbol `batch` at the block's
/// dim) and one of `batches` is not what the sizes add up to.
void check_chunk_sizes(const Graph& graph, const std::vector<PlannedBatch>& batches);

}  // namespace tandem
