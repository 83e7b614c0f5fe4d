// Liveness: what each tensor of a schedule is needed for, and so when it can go, for the
// forward and the training executor alike (one plan on the cpu alone or over many devices
// gives one answer). A tensor here is a slot: one value on one device (schedule.h).
//
//   - requires_grad: whether backward computes a value's gradient (it depends on a trainable
//     parameter, or on a float graph input whose gradient was asked for);
//   - last forward reader: the last action that reads a slot in forward (a copy reads its
//     source and writes its destination; an op writes its output): after it, inference has
//     no use for the slot;
//   - read in backward: what a backward reads (each kernel says which of its inputs and
//     whether its output), what the caller reads between forward and backward (the loss's
//     input, `kept`), and the outputs; training releases the rest after their last forward
//     reader, as PyTorch keeps only what autograd saved;
//   - gradient completion: a parameter's gradient on one device is complete after the
//     backward of the first step that uses it there (backward runs the steps in reverse).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "runtime/exec/schedule.h"

namespace tandem {

/// A parameter on one device: where its gradient is accumulated.
using ParameterKey = std::pair<std::string, Device>;

/// Per value: whether backward computes its gradient. With `input_grads`, the float graph
/// inputs' gradients are asked for.
std::vector<bool> values_requiring_grad(const Graph& graph, const Schedule& schedule, bool input_grads);

/// Per slot: the last action that reads or writes it in forward; -1 when none does.
std::vector<int> last_forward_readers(const Schedule& schedule);

/// Per action: the slots training lets go of after it (what no backward reads). `kept`:
/// values read between forward and backward (the loss's input, each replica's share of a
/// parallel loss), on the device that produces them.
std::vector<std::vector<int>> release_after_forward(const Graph& graph, const Schedule& schedule,
                                                    const std::vector<int>& kept_slots);

/// Per op step: the keys among `keys` whose gradient is complete once that step's backward
/// has been submitted, in the order of the step's parameters.
std::vector<std::vector<ParameterKey>> gradients_complete_after(const Schedule& schedule,
                                                                 const std::vector<ParameterKey>& keys);

}  // namespace tandem
