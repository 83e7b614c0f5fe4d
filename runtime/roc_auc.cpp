#include "runtime/roc_auc.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace tandem {

RocAuc roc_auc(std::span<const float> scores, std::span<const float> labels) {
  TANDEM_ASSERT(scores.size() == labels.size(), "roc_auc: a label per score");
  RocAuc out;
  double positives = 0, negatives = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] != 0.0f && labels[i] != 1.0f) {
      out.undefined = "the targets are not all 0 or 1 (target " + std::to_string(labels[i]) + ")";
      return out;
    }
    if (std::isnan(scores[i])) {
      out.undefined = "a score is NaN";
      return out;
    }
    (labels[i] == 1.0f ? positives : negatives) += 1;
  }
  if (positives == 0 || negatives == 0) {
    out.undefined = labels.empty() ? "no samples"
                                   : std::string("every target is ") + (positives == 0 ? "0" : "1") +
                                         ": the AUC needs both classes";
    return out;
  }
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // the positives' rank sum, each run of equal scores given its average rank (1-based)
  double positive_ranks = 0;
  for (size_t start = 0; start < order.size();) {
    size_t end = start;
    double run_positives = 0;
    for (; end < order.size() && scores[order[end]] == scores[order[start]]; ++end) run_positives += labels[order[end]];
    const double average_rank = (static_cast<double>(start + 1) + static_cast<double>(end)) / 2;
    positive_ranks += run_positives * average_rank;
    start = end;
  }
  out.value = (positive_ranks - positives * (positives + 1) / 2) / (positives * negatives);
  return out;
}

}  // namespace tandem
