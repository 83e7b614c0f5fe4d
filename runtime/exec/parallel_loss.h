// The parallel loss's arithmetic on the host (docs/data-parallel.md, "parallel loss"): each
// replica of a data_parallel block scores its own chunk of the batch on its own device, so
// only the targets' rows travel up and only scalars come back.
#pragma once

#include <vector>

#include "backends/loss_value.h"
#include "core/tensor.h"
#include "graph/graph.h"

namespace tandem {

/// Replica `part`'s rows of the target, copied into a new host tensor: along the scatter dim
/// when the target has the input's extent there (sequence-first [T, N] targets), else along
/// dim 0 ([N] class indices).
Tensor parallel_loss_target(const Tensor& target, const ParallelLoss& parallel, size_t part);

/// The whole batch's loss from the replicas' (in batch order), weighted by what each counted
/// (rows, or targets not ignored), as one loss over the batch would average. With a mean,
/// `gradient_scales` gets, per replica, what its gradient (of its own mean) is multiplied by
/// to be the batch mean's.
LossValue combine_parallel_losses(const std::vector<LossValue>& values, bool mean, std::vector<float>& gradient_scales);

}  // namespace tandem
