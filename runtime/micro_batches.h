// Gradient accumulation's micro-batches, and a file's batches for prediction: a step's batch cut into `accumulate` parts along
// each input's and target's batch dimension, each with the weight its gradient takes in
// the step, so that the summed gradients are those of the whole batch (docs/training.md,
// Gradient accumulation).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"

namespace tandem {

struct MicroBatch {
  TensorMap batch;
  /// The share of the whole batch's loss this part's loss is: its terms over the batch's
  /// (a mean loss: samples, or targets not ignored), or 1 (a sum).
  double weight = 1;
};

/// `batch` (inputs and targets by name, laid out as the model takes them) cut into `parts`
/// micro-batches as equal as can be, in order (the first ones one sample larger when the
/// batch does not divide; fewer parts when it has fewer samples, as an epoch's last batch
/// may). Samples along dimension 0 become views of `batch`; along another dimension, copies.
/// An embedding_bag's flat ids and offsets are cut by bag: a part takes its bags' ids (a
/// view) and their offsets, rebased to start at 0.
std::vector<MicroBatch> split_micro_batches(const TensorMap& batch, int64_t parts, const Graph& graph);

/// `batch` cut into batches of `batch_size` samples in order, the last one shorter when the
/// samples do not divide, as split_micro_batches cuts (inputs alone, or inputs and targets;
/// flat bags by bag). Used to predict over a file a batch at a time (Model::forward_batches).
std::vector<TensorMap> split_batches(const TensorMap& batch, int64_t batch_size, const Graph& graph);

/// The inverse for one output: its batches' tensors (cpu, one dtype, equal but along `dim`)
/// joined along `dim`, in order; a single batch's tensor as it is.
Tensor join_batches(const std::vector<Tensor>& parts, int dim);

}  // namespace tandem
