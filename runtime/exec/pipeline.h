// A pipelined training step (`train: pipeline: {micro_batches: M}`): the step's batch cut
// into micro-batches that flow through the plan's devices one behind the other, so that the
// cpu looks up micro-batch k+1's tables while a GPU runs micro-batch k's layers, and in
// backward the GPU runs micro-batch k+1's layers while the cpu updates k's table gradients.
//
// Each micro-batch has a training executor of its own (its activations and gradients), and
// all of them submit to the same device lanes, which run their work in the order it was
// given: each device takes the micro-batches in turn, and waits for another only where a
// copy or a gradient crosses between them. The host submits in 1F1B order (PipeDream's
// flush schedule, as torch.distributed.pipelining's Schedule1F1B): the forwards of as many
// micro-batches as the plan has segments, then for each micro-batch in turn its loss and
// backward and the next one's forward. So a device holds the activations of at most that
// many micro-batches, not all M (GPipe's fill and drain, which ran every forward first,
// held the whole batch's). The host waits for the lanes once, at the end; before that only
// a loss read back from a GPU holds it, until that micro-batch's forward is through, while
// the lanes work on the forwards already submitted.
//
// Each micro-batch's loss gradient is scaled by its share of the step's loss (weight: its
// samples over the batch's, or 1 for a sum), so the gradients the micro-batches accumulate
// are those of the whole batch, up to the order of the sums. Dropout draws per micro-batch.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "backends/loss_value.h"
#include "core/device.h"
#include "core/tensor.h"
#include "graph/training_spec.h"
#include "runtime/devices/device_report.h"
#include "runtime/exec/gradient_ready.h"
#include "runtime/exec/table_updates.h"

namespace tandem {

class TrainingExecutor;

/// What a pipelined step may hold on each device before the host waits for the lanes: its
/// micro-batches' growth together, measured from what the device held when the step began.
struct PipelineWindow {
  struct Entry {
    Device device;
    size_t start = 0;   // bytes in use when the step began
    size_t budget = 0;  // the sum of the micro-batches' own growth (their first steps')
  };
  std::vector<Entry> devices;

  /// The first call for a device sets its start; every call adds to its budget.
  void add(Device device, size_t start, size_t budget);
  const Entry* find(Device device) const;
};

/// One micro-batch of a pipelined step.
struct PipelinedMicroBatch {
  TrainingExecutor* executor = nullptr;  // its own: no two micro-batches share one
  std::vector<Tensor> inputs;            // graph-input order, on the cpu
  Tensor target;
  uint64_t seed = 0;    // dropout's
  double weight = 1;    // its share of the step's loss
};

/// Runs the micro-batches' forwards, losses and backwards as one step and waits for it; the
/// parameter gradients accumulate as one backward of the whole batch would write them.
/// `ready` (data parallelism over processes) hears of each gradient during the last
/// micro-batch's backward. `loss_scale` multiplies every loss gradient (fp16 loss scaling).
/// Returns the step's loss (each micro-batch's weighted by its share), and in `report` what
/// the devices did during the step. `meanwhile`, when given, is called once the last
/// micro-batch's loss is submitted, before its backward: what the host submits there runs
/// on lanes that would otherwise wait for that backward (the next batch's lookups on the cpu,
/// Note [the next batch ahead] in training_executor.h). `tables`: the tables the last
/// micro-batch's backward updates as it completes their gradients, if every micro-batch's
/// loss is finite (table_updates.h).
LossValue run_pipelined_step(std::vector<PipelinedMicroBatch>& parts, const LossSpec& loss, uint64_t params_version,
                             const GradientReady* ready, float loss_scale, std::vector<DeviceReport>& report,
                             const std::function<void()>& meanwhile = {}, const TableUpdates* tables = nullptr);

}  // namespace tandem
