// Trainer: the training loop around a Model. One step is forward, loss, backward,
// clipping, an optimizer update with the scheduled learning rate, and zeroed gradients
// (docs/training.md), over `accumulate` micro-batches when asked. Every random choice
// (shuffling, dropout) is a function of the seed and a counter, so a run resumed from a
// checkpoint repeats the uninterrupted one bit for bit. distribute() makes it one process
// of a job that trains the model together (docs/distributed.md).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graph/training_spec.h"
#include "runtime/checkpoint.h"
#include "backends/loss_value.h"
#include "runtime/data/dataset.h"
#include "runtime/distributed/distributed_data_parallel.h"
#include "runtime/distributed/optimizer_sharding.h"
#include "runtime/model.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/optim/optimizer.h"
#include "runtime/optimizer_groups.h"
#include "runtime/roc_auc.h"

namespace tandem {

struct EvalResult {
  double loss = 0;                 // mean over the samples
  std::optional<double> accuracy;  // classification losses only
  /// binary_cross_entropy_with_logits only: the ROC AUC of the logits against the targets
  /// over the whole set (runtime/roc_auc.h), or why it is undefined (one class only).
  std::optional<RocAuc> auc;
  int64_t samples = 0;
};

struct EpochReport {
  int64_t epoch = 0;  // from 0
  /// The mean of step_losses weighted by each step's samples (a `sum` loss: unweighted),
  /// so that a short last batch counts by its size.
  double train_loss = 0;
  std::vector<double> step_losses;  // each step's loss, before its update
  std::optional<EvalResult> validation;
  double seconds = 0;
  double samples_per_second = 0;
  /// Steps of the epoch that fp16 loss scaling skipped (their gradients overflowed): no
  /// update, the scale backed off. Always 0 without an fp16 layer.
  int64_t skipped_steps = 0;
};

/// Progress within an epoch: (batches done, batches in the epoch, running loss).
using ProgressFn = std::function<void(int64_t done, int64_t total, double loss)>;

/// Not thread-safe; the model must outlive it.
class Trainer {
 public:
  Trainer(Model& model, TrainingSpec spec);
  /// With the model's own `train:` section; UserError naming the model when it has none
  /// (a model with `loss:` alone), saying how to give one.
  explicit Trainer(Model& model);

  /// Trains as one process of `group`'s job (mpirun -np N): every rank checks that the
  /// others loaded the same model and settings and takes rank 0's weights; from then on each
  /// step's gradients are averaged over the ranks, fit() trains on this rank's share of the
  /// data and validates on its share of the validation set (the metrics are the whole
  /// set's), rank 0 alone writes checkpoints, and load_checkpoint() reads rank 0's file on
  /// every rank. A group of one changes nothing. Call it before the first step and before
  /// load_checkpoint(). JobError (on every rank alike) when the ranks differ.
  void distribute(std::shared_ptr<ProcessGroup> group, DistributedOptions options = {});
  /// This process's rank and the job's ranks (0 and 1 undistributed).
  int rank() const { return ddp_ ? ddp_->rank() : 0; }
  /// The data parallelism over processes distribute() set up; null without one.
  const DistributedDataParallel* distributed() const { return ddp_.get(); }
  int ranks() const { return ddp_ ? ddp_->size() : 1; }
  /// The samples one optimizer step takes over the job: batch x accumulate x ranks.
  int64_t global_batch() const { return spec_.batch * spec_.accumulate * ranks(); }

  /// One optimizer step on `batch` (inputs and targets by name); the batch's loss. With
  /// `accumulate: k` the batch is cut into k micro-batches whose gradients add up to the
  /// batch's (runtime/micro_batches.h). A batch of any size may go, a step at a time.
  ///
  /// A step whose forward or backward throws applied nothing: the weights, the optimizer's
  /// state and steps_done() are as before it, its buffers are back in their devices' pools,
  /// and the gradients are zero (buffers such as running statistics keep what a forward
  /// that completed wrote, as in torch). Out of a device's memory, the error is an
  /// OutOfMemory naming the step, the layer, the device and its bytes; the same Trainer
  /// may go on with a smaller batch (set_batch() for fit()); one process only: under
  /// distribute() the other ranks are inside the step's collectives.
  double step(const TensorMap& batch);
  /// step(batch), and with `next` (the batch of the step after, or null) that step's
  /// uploads and table lookups started while this one's backward runs, when
  /// spec().overlap_next_batch and the model is placed (Note [the next batch ahead] in
  /// runtime/exec/training_executor.h): the same bits as without. fit() gives each step the
  /// next batch of its epoch.
  double step(const TensorMap& batch, const TensorMap* next);
  /// How many table updates ran inside backward so far (Note [a table updated in its
  /// backward] in runtime/exec/table_updates.h).
  int64_t tables_updated_in_backward() const { return optimizer_->tables_updated_in_backward(); }
  /// The batch of fit()'s next epoch, e.g. a smaller one after an OutOfMemory (fit() then
  /// starts the epoch it was in again). UserError below 1.
  void set_batch(int64_t batch);
  /// Mean loss (and accuracy, or AUC) over `data` in inference mode.
  EvalResult evaluate(const Dataset& data);
  /// Trains from the current epoch to spec.epochs; calls `on_epoch` after each epoch
  /// (and saves `checkpoint_path` there when it is not empty).
  void fit(const Dataset& train, const Dataset* validation, const std::string& checkpoint_path,
           const std::function<void(const EpochReport&)>& on_epoch, const ProgressFn& on_progress = {});

  /// Weights, optimizer state, step and epoch, written atomically (by rank 0 alone).
  void save_checkpoint(const std::string& path) const;
  /// Ends fit() after the epoch it is in, once that epoch's checkpoint and on_epoch are done
  /// (early stopping). Every rank of a job must ask alike, as it decides on job-wide values.
  void stop_after_epoch() { stop_after_epoch_ = true; }
  /// Called by fit() as soon as an epoch's checkpoint is written, with the epochs it holds:
  /// for what must know the last checkpoint at any moment (a message on interrupt).
  void set_on_checkpoint(std::function<void(int64_t epochs)> on_checkpoint) { on_checkpoint_ = std::move(on_checkpoint); }
  /// Restores what save_checkpoint wrote (the model must be the same).
  void load_checkpoint(const std::string& path);

  int64_t steps_done() const { return step_; }
  int64_t epochs_done() const { return epoch_; }
  const TrainingSpec& spec() const { return spec_; }
  /// The learning rate of the next step.
  double current_lr() const;
  /// The bytes of optimizer state this process holds (momentum, moments): with
  /// shard_optimizer_state, its share only.
  size_t optimizer_state_bytes() const;
  /// The loss of the last step() (before its update): what a progress callback reports.
  double last_loss() const { return last_loss_; }
  /// The learning rate the last step() applied (current_lr() is the next one's).
  double last_lr() const { return last_lr_; }
  /// The samples fit()'s last step took over the job (an epoch's last batch may be short).
  int64_t last_samples() const { return last_samples_; }
  /// Total optimizer steps of the run, for schedules; set by fit() or by the caller.
  void set_total_steps(int64_t steps) {
    total_steps_ = steps;
    total_from_checkpoint_ = false;
  }
  /// Where fit() says what the user should know about the schedule: a resumed run whose
  /// length differs from its checkpoint's (the schedule follows the new run), or a cosine
  /// schedule whose total_steps ends before the run does. One line each, no newline.
  void set_notice(std::function<void(const std::string&)> notice) { notice_ = std::move(notice); }

  /// Whether steps scale the loss (runtime/optim/loss_scaler.h): a layer of the model runs
  /// in fp16 and `train: loss_scaling` is not disabled. Decided at each step, since the
  /// model's precision may be set until its first pass.
  bool scales_loss() const;
  /// The scale the next step multiplies the loss by (1 when it does not scale it).
  float loss_scale() const { return scales_loss() ? scaler_.scale() : 1.0f; }
  /// Clean steps since the scale last changed: what grows it at growth_interval.
  int64_t loss_scale_growth_tracker() const { return scaler_.growth_tracker(); }
  /// Steps skipped so far (their gradients overflowed at the scale they ran with), a
  /// resumed run's included. They count in steps_done() (the schedule and the data moved
  /// on, as torch's loop calls scheduler.step() anyway) but not in the optimizer's steps.
  int64_t skipped_steps() const { return skipped_steps_; }
  /// Whether the last step() was skipped.
  bool last_step_skipped() const { return last_step_skipped_; }

 private:
  Model& model_;
  TrainingSpec spec_;
  std::unique_ptr<OptimizerGroups> optimizer_;  // over updated_
  std::vector<std::string> names_;
  std::vector<Tensor> params_, grads_;
  std::vector<TouchedRows*> rows_;  // the model's touched rows of each gradient
  /// What this process's optimizer updates: every trained parameter, or with a sharded
  /// optimizer state its share of them (`sharding_`).
  struct Updated {
    std::vector<std::string> names;
    std::vector<Tensor> params, grads;
    std::vector<TouchedRows*> rows;
  } updated_;
  std::unique_ptr<OptimizerSharding> sharding_;
  int64_t step_ = 0;
  int64_t epoch_ = 0;
  int64_t total_steps_ = 0;
  bool total_from_checkpoint_ = false;  // total_steps_ is a resumed run's, not yet this run's
  std::function<void(const std::string&)> notice_;
  bool stop_after_epoch_ = false;
  std::function<void(int64_t)> on_checkpoint_;
  double last_loss_ = 0;
  LossScaler scaler_;
  int64_t skipped_steps_ = 0;
  int64_t skipped_in_a_row_ = 0;
  bool last_step_skipped_ = false;
  double last_lr_ = 0;
  int64_t last_samples_ = 0;
  std::vector<std::string> unreached_;  // parameters with a gradient that the loss does not reach
  std::unique_ptr<DistributedDataParallel> ddp_;
  /// The parameters whose update changes only the rows their gradient lists: tables whose
  /// next batch may be looked up ahead (Model::NextBatch).
  std::set<std::string> ahead_tables_;
  /// Whether steps start on the next batch (step(batch, next)): spec().overlap_next_batch,
  /// a step of one part (no accumulation or micro-batches), one process.
  bool looks_ahead() const;
  /// Whether this step's backward updates the tables whose optimizer takes their row
  /// gradient (Note [a table updated in its backward] in runtime/exec/table_updates.h).
  bool updates_tables_in_backward() const;

  /// Forward and backward of each micro-batch of `batch`, their gradients summed with their
  /// weights but for the last one's, which the step applies once the ranks' are averaged.
  /// Returns the batch's loss and the weight still to apply.
  /// `loss_scale` as Model::loss_and_backward's.
  std::pair<double, double> accumulate_gradients(const TensorMap& batch, uint64_t seed, float loss_scale);
  /// The model's loss_and_backward() of `batch`, pipelined in spec().micro_batches
  /// micro-batches when there are more than one (runtime/exec/pipeline.h).
  /// `tables`: as Model::loss_and_backward's.
  LossValue loss_and_backward(const TensorMap& batch, uint64_t seed, const GradientReady* ready, float loss_scale,
                              const TensorMap* next = nullptr, const TableUpdates* tables = nullptr);
  /// Zeroes the gradients of a step that failed; never throws (an error is on its way).
  void forget_gradients() noexcept;
  /// Unscales this step's gradients; whether the step must be skipped (they overflowed), in
  /// which case the scale backs off. Stops the run when the scale has shrunk to nothing.
  bool unscale_gradients(double loss);
  /// This run's position and settings, as a checkpoint records them (runtime/checkpoint.h).
  CheckpointMetadata checkpoint_metadata() const;
  /// What a checkpoint must match for this run to resume from it.
  ResumingRun resuming_run() const;
  /// Sets the schedule's length to this run's `run_steps` (a resumed run's too, when its
  /// checkpoint's run was another length), telling the notice what changed.
  void lay_schedule_over(int64_t run_steps);
  /// Takes a checked checkpoint's weights, optimizer state, position and loss scaler state.
  void apply_checkpoint(const std::string& path, CheckpointContents checkpoint);
};

/// The columns a dataset must provide for `graph`: each input and target without its
/// batch dimension (the one symbolic dimension, graph/batch_dim.h, recorded as batch_dim).
/// UserError if a shape has no symbol or more than one, or its one is not a plain symbol.
std::vector<ColumnSpec> data_columns(const Graph& graph);

}  // namespace tandem
