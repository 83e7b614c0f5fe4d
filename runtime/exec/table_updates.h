// TableUpdates: the tables whose optimizer update runs inside their backward.
//
// Note [a table updated in its backward]: a `sparse: true` table's gradient is its rows
// alone (core/touched_rows.h, Note [row gradient]), and an optimizer that takes row
// gradients (sgd without momentum and weight decay, adagrad without weight decay,
// rowwise_adagrad, sparse_adam) updates a row from that row's gradient and state only. So,
// as FBGEMM's and TorchRec's fused table optimizers do, the update needs nothing else of the
// step and runs in the same task as the backward that completes the table's gradient, on
// the cpu's lane, with the rows it just wrote still in cache: the host's optimizer step
// then leaves the table alone, and in a placed step the table's update overlaps what the
// other lanes still run. The arithmetic is the step's own, so the weights are the same bits.
//
// The trainer asks for it only where the update could not have depended on the rest of the
// step: one process (under mpirun the rows are summed across ranks first), no gradient
// accumulation (its parts are rescaled after), no gradient clipping (the norm is the whole
// model's) and no fp16 loss scaling (the step may be skipped). With micro-batches the last
// one's backward completes the gradient: every earlier one's contribution is ahead of it on
// the cpu's lane. A step whose loss is not finite updates nothing (the run stops with the
// weights of the last good step): a gradient can be finite where the loss is not (a ReLU
// passes no gradient back from a NaN), so the update reads the loss itself. Where the host
// knows it before backward (the cpu alone) it asks for no update; where it does not (a
// placed or pipelined step, whose loss a lane writes), the cpu's lane waits for the loss's
// lane before the table's backward and the update reads the value there.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "backends/lane.h"
#include "backends/loss_value.h"

namespace tandem {

struct TableUpdates {
  /// The tables' parameter names.
  std::set<std::string> params;
  /// Updates `param` from its row gradient, on the cpu's lane, right after the backward
  /// that completes it.
  std::function<void(const std::string& param)> update;
  /// The step's losses (a pipelined step's micro-batches'), each written by work before
  /// `loss_written` on its lane: the updates run only if every one is finite. Empty: the
  /// host has checked.
  std::vector<const LossValue*> losses;
  std::vector<DeviceEvent> loss_written;
};

}  // namespace tandem
