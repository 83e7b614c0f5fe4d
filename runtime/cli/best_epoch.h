// --keep-best METRIC and --early-stop PATIENCE of tandem train: which epoch's validation
// value is the best so far (its checkpoint is kept), and when the run has gone PATIENCE
// epochs without beating it (Keras's EarlyStopping and ModelCheckpoint(save_best_only)).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/trainer.h"

namespace tandem::cli {

/// Not thread-safe: one per run, fed each epoch's report in order.
class BestEpoch {
 public:
  /// `metric`: val_loss (lower is better), val_accuracy or val_auc (higher is better).
  /// UserError naming the flag when the metric is unknown, when the model's loss gives no
  /// such value (val_accuracy: cross_entropy or nll_loss; val_auc:
  /// binary_cross_entropy_with_logits), or when there is no validation set.
  BestEpoch(std::string metric, const std::string& loss_op, int64_t validation_samples, const std::string& flag);

  /// Whether the epoch (from 1) beats every earlier one; one without the value (an AUC
  /// undefined) does not.
  bool improves(int64_t epoch, const EvalResult& validation);
  /// Epochs since the best one (all of them while there is none).
  int64_t epochs_since_best(int64_t epoch) const { return best_epoch_ ? epoch - *best_epoch_ : epoch; }

  const std::string& metric() const { return metric_; }
  std::optional<int64_t> best_epoch() const { return best_epoch_; }
  double best_value() const { return best_; }

 private:
  std::string metric_;
  std::optional<int64_t> best_epoch_;
  double best_ = 0;
};

/// "ckpt.safetensors" -> "ckpt.best.safetensors": where --keep-best keeps the best epoch's
/// checkpoint, beside the run's.
std::string best_checkpoint_path(const std::string& checkpoint);

}  // namespace tandem::cli
