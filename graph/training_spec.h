// What a model file says about training: its loss and its `train:` section, validated at
// load time like the layers. Plain values; runtime/ turns them into optimizers, a data
// pipeline and a training loop (docs/training.md).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

struct OptimizerConfig {
  std::string name = "sgd";  // sgd, adam, adamw, adagrad, rowwise_adagrad, sparse_adam
  double lr = 0.01;
  double momentum = 0, dampening = 0;  // sgd
  bool nesterov = false;               // sgd
  double weight_decay = 0;             // sgd, adam, adagrad, rowwise_adagrad: L2 on the gradient; adamw: decoupled
  double beta1 = 0.9, beta2 = 0.999;   // adam, adamw, sparse_adam
  double eps = 1e-8;                   // adam, adamw, sparse_adam; adagrad, rowwise_adagrad: 1e-10
  double lr_decay = 0;                  // adagrad, rowwise_adagrad: lr / (1 + (step - 1) * lr_decay)
  double initial_accumulator_value = 0;  // adagrad, rowwise_adagrad
};

/// The optimizers Tandem has (torch.optim's names; rowwise_adagrad is torchrec's).
inline const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names = {"sgd", "adam", "adamw", "adagrad", "rowwise_adagrad", "sparse_adam"};
  return names;
}

/// Optimizer `name` with its constructor's defaults (torch.optim's, torchrec's).
inline OptimizerConfig optimizer_defaults(const std::string& name) {
  OptimizerConfig o;
  o.name = name;
  if (name == "adam" || name == "adamw" || name == "sparse_adam") o.lr = 0.001;
  if (name == "adamw") o.weight_decay = 0.01;
  if (name == "adagrad" || name == "rowwise_adagrad") o.eps = 1e-10;
  return o;
}

/// One entry of `train: optimizer_groups:` (torch.optim's param_groups; TorchRec's fused
/// table optimizer beside a dense one): the parameters whose names or layer paths match
/// one of `params` (globs) are updated by `optimizer`; the first group that matches a
/// parameter takes it, and the parameters no group matches take `train: optimizer:`.
struct OptimizerGroup {
  std::vector<std::string> params;
  /// "FILE:LINE:COLUMN" of each pattern in the model file (empty when the API built it):
  /// a pattern that matches no trained parameter is reported there.
  std::vector<std::string> params_at;
  OptimizerConfig optimizer;
};

struct ScheduleConfig {
  std::string name = "constant";  // constant, step, cosine
  int64_t step_size = 1;          // step
  double gamma = 0.1;             // step
  int64_t warmup_steps = 0;       // cosine
  int64_t total_steps = 0;        // cosine; 0: the run's total
  double min_lr = 0;              // cosine
};

struct DataSpec {
  /// A model file's relative path is resolved next to that file when it loads (a flag's
  /// stays relative to the working directory).
  std::string path;
  /// "FILE:LINE:COLUMN" of the `path:` that named it in a model file; empty when a flag or
  /// the API gave the path. A file that cannot be opened is reported there.
  std::string named_at;
  std::string format;                          // "csv" or "safetensors"; "" = from the extension
  bool header = false;                         // csv: skip the first line
  std::map<std::string, std::string> columns;  // csv: name -> "a:b" (columns a..b-1) or "a"; empty: consecutive
};

/// `loss_scaling:` of `train:`: torch.cuda.amp.GradScaler's dynamic loss scaling, with its
/// defaults and argument names. It applies when a layer of the model runs in fp16, whose
/// range flushes small gradients to zero unless the loss is scaled up first; bf16 and fp32
/// have fp32's range and train without it.
struct LossScalingConfig {
  bool enabled = true;           // GradScaler(enabled=...): false trains fp16 unscaled
  double init_scale = 65536.0;   // 2^16
  double growth_factor = 2.0;    // > 1
  double backoff_factor = 0.5;   // in (0, 1)
  int64_t growth_interval = 2000;  // clean steps in a row before the scale grows
};

struct TrainingSpec {
  int64_t epochs = 1;
  int64_t batch = 32;
  /// Micro-batches of `batch` samples whose gradients one optimizer step sums (gradient
  /// accumulation): a step takes batch x accumulate samples, a process of a distributed
  /// job communicates once per step.
  int64_t accumulate = 1;
  /// `pipeline: {micro_batches: M}`: each batch (each accumulated part) cut into M
  /// micro-batches that flow through the plan's devices one behind the other, so that the
  /// devices work at once (runtime/exec/pipeline.h); one optimizer step, the same gradients.
  int64_t micro_batches = 1;
  /// `pipeline: {overlap_next_batch: B}`: whether a placed step starts on the next batch
  /// (its uploads and the cpu's lookups of tables whose update changes only the rows their
  /// gradient lists) while its own backward runs, looking changed rows up again after the
  /// update: the same bits (Note [the next batch ahead] in runtime/exec/training_executor.h).
  bool overlap_next_batch = true;
  /// `update_tables_in_backward: B`: whether a `sparse: true` table whose optimizer takes
  /// its row gradient is updated in the task of the backward that completes that gradient,
  /// where the step allows (Note [a table updated in its backward] in
  /// runtime/exec/table_updates.h): the same bits as after backward.
  bool update_tables_in_backward = true;
  bool shuffle = true;
  bool drop_last = false;
  uint64_t seed = 0;
  double validation_split = 0.0;
  OptimizerConfig optimizer;
  /// Per-parameter-group optimizers (empty: `optimizer` updates every parameter).
  std::vector<OptimizerGroup> optimizer_groups;
  ScheduleConfig schedule;
  std::optional<double> clip_grad_norm;
  LossScalingConfig loss_scaling;
  std::optional<DataSpec> data;
  /// `keep_best: METRIC` (val_loss, val_accuracy or val_auc): the CLI keeps the checkpoint
  /// of the epoch with the best validation value too, as --keep-best; empty: off.
  std::string keep_best;
  /// `early_stop: PATIENCE`: training ends once the validation value (keep_best's metric,
  /// else val_loss) has gone this many epochs without improving, as --early-stop; 0: off.
  int64_t early_stop = 0;
};

/// `loss:` of a model file.
struct LossSpec {
  std::string op;      // cross_entropy, nll_loss, mse_loss, binary_cross_entropy_with_logits
  int input = -1;      // value id of the scored tensor
  int target = -1;     // value id of the target (a graph target)
  std::string reduction = "mean";
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  /// Each replica of the data_parallel block that makes `input` scores its own chunk on its
  /// device; only the scalars travel (placement/replicate.h).
  bool parallel = false;
};

}  // namespace tandem
