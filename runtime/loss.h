// Training losses, forward and backward together, with torch.nn.functional's semantics:
// cross_entropy (ignore_index, label_smoothing), nll_loss, mse_loss and
// binary_cross_entropy_with_logits, reduced by mean or sum.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "graph/training_spec.h"

namespace tandem {

struct LossValue {
  double loss = 0;     // the reduced loss
  int64_t counted = 0; // samples (classification: targets not ignored) or elements it averages over
  int64_t correct = 0; // classification: arg-max equal to the target
  /// binary_cross_entropy_with_logits: every element's logit and target, in order, for the
  /// ROC AUC of an evaluation (runtime/roc_auc.h); empty for the other losses.
  std::vector<float> scores, labels;
};

/// The loss of `input` against `target`; when `grad_input` is defined (input's shape),
/// also writes dLoss/dInput into it (assigned). Throws UserError for a class index
/// outside [0, C) that is not ignore_index.
LossValue compute_loss(const LossSpec& spec, const Tensor& input, const Tensor& target, Tensor* grad_input);

}  // namespace tandem
