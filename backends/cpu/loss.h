// The CPU's training losses, forward and backward together, with torch.nn.functional's
// semantics: cross_entropy (ignore_index, label_smoothing), nll_loss, mse_loss and
// binary_cross_entropy_with_logits, reduced by mean or sum.
#pragma once

#include "backends/loss_value.h"
#include "core/tensor.h"
#include "graph/training_spec.h"

namespace tandem::cpu {

/// The loss of `input` against `target`; when `grad_input` is defined (input's shape),
/// also writes dLoss/dInput into it (assigned). Throws UserError for a class index
/// outside [0, C) that is not ignore_index.
LossValue compute_loss(const LossSpec& spec, const Tensor& input, const Tensor& target, Tensor* grad_input);

}  // namespace tandem::cpu
