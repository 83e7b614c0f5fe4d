// Which parameters a model's loss trains: those its gradient reaches. A layer's parameters
// get a gradient when the loss's input is computed from the layer's output through float32
// tensors (an int64 tensor, such as an index, carries none), as torch's autograd graph
// decides which parameters get a .grad at all.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace tandem {

/// The trainable parameters (full names, "enc.fc.weight") the loss's gradient reaches, in
/// graph order; empty without a loss.
std::vector<std::string> parameters_the_loss_reaches(const Graph& graph);

/// UserError unless the loss's gradient reaches at least one trainable parameter: a model
/// without any, or whose loss does not read what its parameters compute, has nothing to
/// train. The message names the parameters that would get no gradient.
void check_loss_reaches_parameters(const Graph& graph);

}  // namespace tandem
