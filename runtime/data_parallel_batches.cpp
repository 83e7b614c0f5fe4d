#include "runtime/data_parallel_batches.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "core/error.h"

namespace tandem {
namespace {

/// Gradient accumulation's parts of a step's batch: as equal as can be, the first ones one
/// sample larger (split_micro_batches).
std::set<int64_t> micro_batch_sizes(int64_t step_batch, int64_t accumulate) {
  const int64_t parts = std::min(step_batch, std::max<int64_t>(accumulate, 1));
  std::set<int64_t> sizes{step_batch / parts};
  if (step_batch % parts) sizes.insert(step_batch / parts + 1);
  return sizes;
}

/// The first input of block `b` (what it scatters), or -1.
int scattered_input(const Graph& g, const Block& block) {
  for (int n = block.first_node; n < block.end_node; ++n)
    for (int v : g.nodes[n].inputs) {
      const int producer = g.values[v].producer;
      if (producer < block.first_node || producer >= block.end_node) return v;
    }
  return -1;
}

}  // namespace

std::vector<PlannedBatch> planned_batches(int64_t samples, int64_t batch, int64_t accumulate, bool drop_last,
                                          const std::string& what) {
  std::vector<PlannedBatch> out;
  if (samples <= 0 || batch <= 0) return out;
  const int64_t step = batch * std::max<int64_t>(accumulate, 1);
  const std::string of = " (" + std::to_string(samples) + " " + what + " samples in batches of " +
                         std::to_string(step) + (accumulate > 1 ? ", " + std::to_string(accumulate) + " micro-batches a step" : "") + ")";
  if (samples >= step)
    for (int64_t size : micro_batch_sizes(step, accumulate)) out.push_back({size, "the " + what + " batches" + of});
  const int64_t last = samples % step;
  if (last != 0 && !drop_last)
    for (int64_t size : micro_batch_sizes(last, accumulate))
      out.push_back({size, "the last " + what + " batch" + of});
  return out;
}

void check_chunk_sizes(const Graph& graph, const std::vector<PlannedBatch>& batches) {
  for (const Block& block : graph.blocks) {
    if (!block.data_parallel || block.data_parallel->chunk_sizes.empty()) continue;
    const DataParallelSpec& dp = *block.data_parallel;
    const int input = scattered_input(graph, block);
    if (input < 0) continue;
    const SymShape& shape = graph.values[input].type.shape;
    const int64_t rank = static_cast<int64_t>(shape.size());
    const int64_t dim = dp.dim < 0 ? dp.dim + rank : dp.dim;
    if (dim < 0 || dim >= rank || shape[dim].as_symbol() != std::optional<std::string>("batch")) continue;
    const int64_t total = std::accumulate(dp.chunk_sizes.begin(), dp.chunk_sizes.end(), int64_t{0});
    for (const PlannedBatch& b : batches)
      if (b.size != total)
        throw UserError(block.location.str() + ": data_parallel block '" + block.path + "': chunk_sizes add up to " +
                        std::to_string(total) + ", but the run feeds batches of " + std::to_string(b.size) +
                        " samples too: " + b.what + ". chunk_sizes must add up to every batch: make the batch " +
                        std::to_string(total) + " and the sample counts its multiples (--drop-last drops a short "
                        "training batch; validation keeps its last), or use chunking: equal or memory, which size each "
                        "batch's chunks anew");
  }
}

}  // namespace tandem
