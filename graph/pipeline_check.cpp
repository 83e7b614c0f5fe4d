#include "graph/pipeline_check.h"

namespace tandem {

namespace {

bool inside_data_parallel(const Graph& graph, const Node& node) {
  for (int b = node.block; b >= 0; b = graph.blocks[static_cast<size_t>(b)].parent)
    if (graph.blocks[static_cast<size_t>(b)].data_parallel) return true;
  return false;
}

}  // namespace

const Node* layer_refusing_micro_batches(const Graph& graph) {
  for (const Node& node : graph.nodes)
    if (node.op.rfind("batch_norm", 0) == 0 && !inside_data_parallel(graph, node)) return &node;
  return nullptr;
}

std::string micro_batch_refusal(const Node& node, const std::string& asked) {
  return asked + " cuts each batch into micro-batches, but layer '" + node.path + "' (" + node.op + ", " +
         node.location.str() + ") normalises over its whole batch: over micro-batches it would train with each "
         "micro-batch's statistics, another model. Train it without micro-batches, or put the layer in a "
         "data_parallel block, whose replicas already normalise over their own chunks";
}

}  // namespace tandem
