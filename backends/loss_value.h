// What a training loss computed: the same on every device, so the runtime sums replicas'
// values and reports them without knowing where they came from.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem {

struct LossValue {
  double loss = 0;     // the reduced loss
  int64_t counted = 0; // samples (classification: targets not ignored) or elements it averages over
  int64_t correct = 0; // classification: arg-max equal to the target
  /// binary_cross_entropy_with_logits: every element's logit and target, in order, for the
  /// ROC AUC of an evaluation (runtime/roc_auc.h); empty for the other losses.
  std::vector<float> scores, labels;
};

}  // namespace tandem
