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
//
// Note [a table stepped in its backward]: plain SGD's update of a row, p = fma(g, -lr, p),
// needs no state, so a table's backward can apply the gradient to the table as it goes
// (FBGEMM's fused SGD does the same) instead of writing a row gradient that the update then
// reads back. An entry whose row no other entry of the batch touched steps that row
// directly; a row several entries touched (found in one pass over the ids, by bits) has
// them summed aside from zero, in the batch's order, and steps once after them
// (TouchedRows::mark_stepped()). Either way the row's bits are those of its update from a
// row gradient, and of a dense table's; a batch of mostly distinct rows (16,384 ids in a
// table of 100,000) writes and reads back almost no row gradient. The executor asks for it
// (BackwardArgs::table_step) where the table's only layer can do it
// (Kernel::steps_table_in_backward(): embeddings and sum or mean bags) and the step's
// losses are finite, else that table's update comes after its backward as above; never
// with micro-batches, whose earlier ones leave row gradients for the last one's update.
#pragma once

#include <functional>
#include <map>
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
  /// Of those, the ones whose backward may step the table itself, by this factor (Note [a
  /// table stepped in its backward]), and what is told when one did, on the cpu's lane
  /// instead of `update`.
  std::map<std::string, float> steps;
  std::function<void(const std::string& param)> stepped;
  /// The step's losses (a pipelined step's micro-batches'), each written by work before
  /// `loss_written` on its lane: the updates run only if every one is finite. Empty: the
  /// host has checked.
  std::vector<const LossValue*> losses;
  std::vector<DeviceEvent> loss_written;
};

}  // namespace tandem
