// ROC AUC: how well scores rank the positives of a binary target above its negatives, the
// figure a click model is judged by (a model that knows nothing scores 0.5 however skewed
// the clicks are, where its loss only says how skewed they are). Reported beside the
// validation loss of a model trained with binary_cross_entropy_with_logits.
#pragma once

#include <optional>
#include <span>
#include <string>

namespace tandem {

struct RocAuc {
  std::optional<double> value;  // in [0, 1]; none when undefined
  std::string undefined;        // why there is no value: one class only, soft targets, NaN scores
};

/// sklearn.metrics.roc_auc_score(labels, scores): the probability that a random positive
/// scores above a random negative, a tie counting one half (the Mann-Whitney statistic,
/// with tied scores given their average rank; equal to the trapezoidal area under the ROC
/// curve). `labels` must be 0 or 1 and hold both; otherwise the value is undefined and
/// `undefined` says why. O(n log n), in double.
RocAuc roc_auc(std::span<const float> scores, std::span<const float> labels);

}  // namespace tandem
