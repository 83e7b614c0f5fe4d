// A map of tensors sent from one rank to every other: names, dtypes and shapes first, then
// the values, so that the receivers need not know what is coming (a checkpoint rank 0
// read, one rank's share of the optimizer state).
#pragma once

#include <string>

#include "core/tensor.h"
#include "runtime/distributed/process_group.h"

namespace tandem {

/// Every rank's `tensors` become rank `root`'s (the others' are replaced). `what` names
/// the collectives in errors.
void broadcast_tensors(ProcessGroup& group, TensorMap& tensors, int root, const std::string& what);

}  // namespace tandem
