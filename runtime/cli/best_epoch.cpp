#include "runtime/cli/best_epoch.h"

#include "core/error.h"

namespace tandem::cli {

BestEpoch::BestEpoch(std::string metric, const std::string& loss_op, int64_t validation_samples,
                     const std::string& flag)
    : metric_(std::move(metric)) {
  const bool classification = loss_op == "cross_entropy" || loss_op == "nll_loss";
  const bool binary = loss_op == "binary_cross_entropy_with_logits";
  if (metric_ != "val_loss" && metric_ != "val_accuracy" && metric_ != "val_auc")
    throw UserError(flag + " '" + metric_ + "': the metrics are val_loss (lower is better), val_accuracy and val_auc");
  if (metric_ == "val_accuracy" && !classification)
    throw UserError(flag + " val_accuracy: the model's loss " + loss_op +
                    " gives no accuracy (cross_entropy and nll_loss do); use val_loss" +
                    (binary ? " or val_auc" : ""));
  if (metric_ == "val_auc" && !binary)
    throw UserError(flag + " val_auc: the model's loss " + loss_op +
                    " gives no AUC (binary_cross_entropy_with_logits does); use val_loss" +
                    (classification ? " or val_accuracy" : ""));
  if (validation_samples == 0)
    throw UserError(flag + " watches the validation " + metric_.substr(4) +
                    ", and the run has no validation set: give --validation-split F (or train: validation_split:)");
}

bool BestEpoch::improves(int64_t epoch, const EvalResult& validation) {
  std::optional<double> value;
  if (metric_ == "val_loss") value = validation.loss;
  if (metric_ == "val_accuracy") value = validation.accuracy;
  if (metric_ == "val_auc" && validation.auc) value = validation.auc->value;
  if (!value) return false;
  const bool lower_is_better = metric_ == "val_loss";
  if (best_epoch_ && (lower_is_better ? *value >= best_ : *value <= best_)) return false;
  best_ = *value;
  best_epoch_ = epoch;
  return true;
}

std::string best_checkpoint_path(const std::string& checkpoint) {
  const std::string suffix = ".safetensors";
  if (checkpoint.ends_with(suffix))
    return checkpoint.substr(0, checkpoint.size() - suffix.size()) + ".best" + suffix;
  return checkpoint + ".best";
}

}  // namespace tandem::cli
