#include "runtime/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <set>

#include "backends/dropout_mask.h"
#include "backends/trace.h"
#include "core/printable_text.h"
#include "graph/batch_dim.h"
#include "graph/loss_reach.h"
#include "runtime/checkpoint.h"
#include "runtime/data_parallel_batches.h"
#include "graph/pipeline_check.h"
#include "runtime/micro_batches.h"

namespace tandem {
namespace {

uint64_t step_seed(uint64_t seed, int64_t step) {
  return seed * 0xd1b54a32d192ed03ULL + static_cast<uint64_t>(step) * golden_ratio_64 + 1;
}

/// The dropout seed of micro-batch `micro` of a step on `rank`: the step's own for the
/// first micro-batch of rank 0 (so that one process without accumulation draws as before),
/// another stream for every other.
uint64_t micro_seed(uint64_t step, int rank, int64_t micro) {
  if (rank == 0 && micro == 0) return step;
  uint64_t z = step ^ (static_cast<uint64_t>(rank) << 32 | static_cast<uint64_t>(micro));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;  // splitmix64's finaliser
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// The inputs and targets whose batch is not their first dimension (graph/batch_dim.h, as
/// data_columns), for to_model_layout. Unlike data_columns it refuses nothing: a Dataset
/// the caller built for a model with other symbols is fed as is.
std::vector<ColumnSpec> moved_columns(const Graph& graph) {
  std::vector<ColumnSpec> out;
  auto add = [&](const GraphInput& decl) {
    const std::optional<int> batch_dim = batch_dim_of(graph.values[decl.value].type.shape);
    if (!batch_dim || *batch_dim == 0) return;
    ColumnSpec c;
    c.name = decl.name;
    c.batch_dim = *batch_dim;
    out.push_back(std::move(c));
  };
  for (const GraphInput& in : graph.inputs) add(in);
  for (const GraphInput& t : graph.targets) add(t);
  return out;
}

/// "a batch of 512": the batch's size as its inputs bind it, for an error's context.
std::string batch_size_text(const TensorMap& batch, const Graph& graph) {
  for (const GraphInput& in : graph.inputs) {
    const SymShape& shape = graph.values[in.value].type.shape;
    auto it = batch.find(in.name);
    if (it == batch.end()) continue;
    for (size_t d = 0; d < shape.size() && d < static_cast<size_t>(it->second.dim()); ++d)
      if (auto symbol = shape[d].as_symbol(); symbol && *symbol == "batch")
        return "a batch of " + std::to_string(it->second.size(static_cast<int64_t>(d)));
  }
  return "its batch";
}

}  // namespace

namespace {

const TrainingSpec& train_section(const Model& model) {
  if (model.graph().loss && !model.graph().training)
    throw UserError("model '" + model.graph().name + "' has no train: section to take the optimizer and batch from; add "
                    "one (train: {optimizer: {name: sgd, lr: 0.01}}) or give the settings: Trainer(model, TrainingSpec{...})");
  static const TrainingSpec no_loss;  // the constructor refuses a model without loss:, saying so
  return model.graph().training ? *model.graph().training : no_loss;
}

}  // namespace

Trainer::Trainer(Model& model) : Trainer(model, train_section(model)) {}

Trainer::Trainer(Model& model, TrainingSpec spec)
    : model_(model), spec_(std::move(spec)), scaler_(spec_.loss_scaling) {
  if (spec_.optimizer.name.empty())
    throw UserError("the training settings of model '" + model_.graph().name + "' name no optimizer; set "
                    "TrainingSpec::optimizer.name (sgd, adam, adamw, adagrad, ...)");
  if (!model_.graph().loss)
    throw UserError("model '" + model_.graph().name + "' has no loss: add loss: {op: ..., target: ...} to train it");
  check_loss_reaches_parameters(model_.graph());
  if (spec_.micro_batches < 1) throw UserError("micro_batches must be at least 1, got " + std::to_string(spec_.micro_batches));
  if (spec_.micro_batches > 1)
    if (const Node* node = layer_refusing_micro_batches(model_.graph()))
      throw UserError(micro_batch_refusal(*node, std::to_string(spec_.micro_batches) + " micro-batches a step"));
  // What the loss's gradient reaches is what the optimizer updates: not buffers (running
  // statistics), and not a parameter the loss does not depend on, which torch leaves
  // without a .grad and its optimizers skip (no weight decay, no momentum). A row gradient
  // (sparse: true) has no dense tensor: its rows hold it.
  const std::vector<std::string> reached = parameters_the_loss_reaches(model_.graph());
  const std::set<std::string> trained(reached.begin(), reached.end());
  const TensorMap& dense_grads = model_.gradients();
  for (auto& [name, rows] : model_.gradient_rows()) {
    if (!trained.count(name)) {
      unreached_.push_back(name);
      continue;
    }
    auto dense = dense_grads.find(name);
    names_.push_back(name);
    params_.push_back(model_.parameters().at(name));
    grads_.push_back(dense == dense_grads.end() ? Tensor() : dense->second);
    rows_.push_back(&rows);
  }
  updated_ = {names_, params_, grads_, rows_};
  // refuses what cannot update a row gradient, naming the parameter
  optimizer_ = std::make_unique<OptimizerGroups>(spec_, updated_.names, updated_.params, updated_.grads, updated_.rows);
  for (const std::string& name : names_)
    if (optimizer_->updates_listed_rows_only(name)) ahead_tables_.insert(name);
}

bool Trainer::looks_ahead() const {
  // Accumulated parts and micro-batches run on executors of their own, and under mpirun the
  // rows an update changes are the ranks' together: not (yet) looked ahead.
  return spec_.overlap_next_batch && spec_.accumulate == 1 && spec_.micro_batches == 1 && !ddp_;
}

bool Trainer::updates_tables_in_backward() const {
  // Note [a table updated in its backward]: only where the update cannot depend on the rest
  // of the step: the rows summed over ranks (mpirun), gradient accumulation's later parts
  // and rescaling, a norm over every gradient (clipping), fp16's skipped steps
  return spec_.update_tables_in_backward && spec_.accumulate == 1 && !ddp_ && !sharding_ && !spec_.clip_grad_norm &&
         !scales_loss();
}

bool Trainer::scales_loss() const {
  if (!spec_.loss_scaling.enabled) return false;
  const Graph& g = model_.graph();
  return std::any_of(g.nodes.begin(), g.nodes.end(),
                     [&](const Node& n) { return layer_precision(g, n) == Precision::fp16; });
}

double Trainer::current_lr() const {
  return scheduled_lr(spec_.schedule, spec_.optimizer.lr, step_, std::max<int64_t>(total_steps_, 1));
}

void Trainer::distribute(std::shared_ptr<ProcessGroup> group, DistributedOptions options) {
  if (!group || group->size() <= 1) return;
  TANDEM_ASSERT(step_ == 0 && !ddp_, "distribute() before the first step, once");
  // DDP's rule: a parameter that gets no gradient is an error unless asked to find such
  // ones, since a rank would otherwise wait for its reduction for ever. Here the graph
  // says which they are before training, on every rank alike.
  if (!unreached_.empty() && !options.find_unused_parameters) {
    std::string names;
    for (const std::string& n : unreached_) names += (names.empty() ? "'" : ", '") + n + "'";
    throw JobError("the loss reaches no gradient of " + names + ": distributed training (as DDP) refuses " +
                   "parameters that get no gradient; pass --find-unused-parameters (DDP's " +
                   "find_unused_parameters=True) to train the others and leave these as they are");
  }
  ddp_ = std::make_unique<DistributedDataParallel>(std::move(group), model_, spec_, names_, rows_, options);
  spec_.seed = ddp_->rank0_seed();  // the data's order and split, the dropout masks: the same on every rank
  if (options.shard_optimizer_state) {
    std::vector<bool> shardable;
    for (TouchedRows* r : rows_) shardable.push_back(!r->holds_values());
    sharding_ = std::make_unique<OptimizerSharding>(ddp_->group(), params_, shardable);
    updated_ = {};
    for (size_t i : sharding_->mine()) {
      updated_.names.push_back(names_[i]);
      updated_.params.push_back(params_[i]);
      updated_.grads.push_back(grads_[i]);
      updated_.rows.push_back(rows_[i]);
    }
    optimizer_ = std::make_unique<OptimizerGroups>(spec_, updated_.names, updated_.params, updated_.grads,
                                                   updated_.rows, /*check_patterns=*/false);
  }
}

std::pair<double, double> Trainer::accumulate_gradients(const TensorMap& batch, uint64_t seed, float loss_scale) {
  std::vector<MicroBatch> parts = split_micro_batches(batch, spec_.accumulate, model_.graph());
  // a part whose targets are all ignored adds nothing to the batch's mean (and its own mean
  // would divide by zero)
  std::erase_if(parts, [](const MicroBatch& m) { return m.weight == 0; });
  ParameterDevices& devices = model_.parameter_devices();
  double loss = 0;
  for (size_t j = 0; j < parts.size(); ++j) {
    // Horner's rule: the gradients so far are sum_i (w_i / w_{j-1}) g_i; rescaled to w_j's
    // units before g_j adds to itself, and by the last weight once all are in, each
    // part's gradient ends weighted by its share. Equal parts (the common case) need no
    // rescaling until the end.
    if (j > 0 && parts[j].weight != parts[j - 1].weight)
      scale_gradients(grads_, static_cast<float>(parts[j - 1].weight / parts[j].weight), rows_, devices);
    // the ranks communicate once a step: during the last part's backward
    const GradientReady* ready = ddp_ && j + 1 == parts.size() ? ddp_->start_backward(step_) : nullptr;
    const LossValue value = loss_and_backward(parts[j].batch, micro_seed(seed, rank(), static_cast<int64_t>(j)), ready, loss_scale);
    loss += parts[j].weight * value.loss;
  }
  return {loss, parts.back().weight};
}

LossValue Trainer::loss_and_backward(const TensorMap& batch, uint64_t seed, const GradientReady* ready, float loss_scale,
                                     const TensorMap* next, const TableUpdates* tables) {
  if (spec_.micro_batches == 1) {
    NextBatch ahead;
    if (next && looks_ahead()) ahead = {next, &ahead_tables_};
    return model_.loss_and_backward(batch, seed, ready, loss_scale, ahead, tables);
  }
  std::vector<MicroBatch> parts = split_micro_batches(batch, spec_.micro_batches, model_.graph());
  std::erase_if(parts, [](const MicroBatch& m) { return m.weight == 0; });  // all its targets ignored: adds nothing
  std::vector<uint64_t> seeds;  // the first micro-batch draws dropout as the batch would; the others their own streams
  for (size_t k = 0; k < parts.size(); ++k) seeds.push_back(micro_seed(seed, 0, static_cast<int64_t>(k)));
  return model_.pipelined_loss_and_backward(parts, seeds, ready, loss_scale, {}, tables);
}

void Trainer::forget_gradients() noexcept {
  try {
    model_.zero_gradients();
  } catch (...) {  // an error is already on its way; the next step zeroes them again
  }
}

void Trainer::set_batch(int64_t batch) {
  if (batch < 1) throw UserError("the batch must be at least 1, got " + std::to_string(batch));
  spec_.batch = batch;
}

double Trainer::step(const TensorMap& batch) { return step(batch, nullptr); }

double Trainer::step(const TensorMap& batch, const TensorMap* next) {
  // Zeroing, clipping and the update read the rows backward touched: on an embedding table
  // only its lookups' rows where that gives the dense result's bits (core/touched_rows.h).
  {
    HostSpan span("gradients zeroed");
    model_.zero_gradients();
  }
  const uint64_t seed = step_seed(spec_.seed, step_);
  const bool scaling = scales_loss();
  const float loss_scale = scaling ? scaler_.scale() : 1.0f;
  double loss = 0, weight_left = 1;
  try {
    if (spec_.accumulate > 1) {
      std::tie(loss, weight_left) = accumulate_gradients(batch, seed, loss_scale);
    } else {
      const GradientReady* ready = ddp_ ? ddp_->start_backward(step_) : nullptr;
      TableUpdates tables;
      if (updates_tables_in_backward())
        tables = optimizer_->prepare_table_updates(spec_.schedule, step_, std::max<int64_t>(total_steps_, 1));
      loss = loss_and_backward(batch, micro_seed(seed, rank(), 0), ready, loss_scale, next,
                               tables.params.empty() ? nullptr : &tables)
                 .loss;
    }
  } catch (const OutOfMemory& e) {
    // Nothing of the step was applied: the model returned its buffers as the error left it
    // (TrainingExecutor::ReleaseOnError), the weights and the optimizer's state are
    // untouched, and the step is not counted. The gradients backward had written so far go,
    // so that the model is as if the step had not run and a smaller batch can go next.
    forget_gradients();
    throw e.in("training step " + std::to_string(step_ + 1) + " (" + batch_size_text(batch, model_.graph()) + ")");
  } catch (...) {
    forget_gradients();
    throw;
  }
  if (ddp_) {
    HostSpan span("gradients averaged over the ranks");
    ddp_->finish_backward();
  }
  HostSpan span("optimizer step");
  // The host's tensors; the arithmetic of a parameter that GPUs hold runs on them.
  ParameterDevices& devices = model_.parameter_devices();
  if (weight_left != 1) scale_gradients(grads_, static_cast<float>(weight_left), rows_, devices);
  // fp16 loss scaling: a step whose gradients overflowed is skipped (an infinite loss gives
  // such gradients too), not stopped. Distributed, every rank holds the same averaged
  // gradients, so every rank skips the same steps.
  last_step_skipped_ = scaling && unscale_gradients(loss);
  if (last_step_skipped_) {
    ++step_;
    last_loss_ = loss;
    return loss;
  }
  // Before the update: the weights stay those of the last good step. Distributed, each
  // rank judges its own loss; one that stops ends the job, named.
  if (!std::isfinite(loss))
    throw UserError("step " + std::to_string(step_ + 1) + " (epoch " + std::to_string(epoch_ + 1) +
                    "): the training loss is " + (std::isnan(loss) ? "NaN" : loss > 0 ? "+inf" : "-inf") +
                    "; the run stopped before updating the weights. Lower the learning rate (--lr), clip gradients "
                    "(train: clip_grad_norm), or check the data");
  if (spec_.clip_grad_norm) clip_grad_norm(grads_, *spec_.clip_grad_norm, rows_, devices);
  last_lr_ = current_lr();
  optimizer_->step(devices, spec_.schedule, step_, std::max<int64_t>(total_steps_, 1));
  if (sharding_) sharding_->share_parameters(params_, "the parameters each rank updated");
  if (ddp_) ddp_->share_buffers();
  model_.parameters_changed();
  // the next batch's lookups made ahead read the rows this update changed again: the rows
  // each table's gradient lists, still as backward left them
  model_.look_up_changed_rows();
  ++step_;
  last_loss_ = loss;
  return loss;
}

bool Trainer::unscale_gradients(double loss) {
  const bool found_inf = !scaler_.unscale_and_check(grads_, rows_, model_.parameter_devices());
  // A finite loss with finite gradients, or a loss that is not finite while the gradients
  // are (nothing to skip): the update goes on, or the loss check stops it.
  if (!found_inf) {
    if (std::isfinite(loss)) {
      scaler_.update(false);
      skipped_in_a_row_ = 0;
    }
    return false;
  }
  scaler_.update(true);
  ++skipped_steps_;
  ++skipped_in_a_row_;
  // A loss that stays NaN (a diverged run) overflows at every scale: torch would skip for
  // ever while the scale shrinks to zero. Once it is below fp32's normal range no gradient
  // can overflow because of it, so the cause is the model or the data.
  if (!(scaler_.scale() >= std::numeric_limits<float>::min()))
    throw UserError("step " + std::to_string(step_ + 1) + " (epoch " + std::to_string(epoch_ + 1) + "): the gradients " +
                    "were not finite (the training loss is " + short_number(loss) + ") in " +
                    std::to_string(skipped_in_a_row_) + " steps in a row, and fp16 loss scaling skipped each until " +
                    "its scale fell to " + short_number(scaler_.scale()) + ": the run stopped. Lower the learning " +
                    "rate (--lr), clip gradients (train: clip_grad_norm), or check the data");
  return true;
}

EvalResult Trainer::evaluate(const Dataset& data) {
  EvalResult result;
  if (data.size() == 0) return result;
  const LossSpec& loss = *model_.graph().loss;
  bool classification = loss.op == "cross_entropy" || loss.op == "nll_loss";
  const std::vector<ColumnSpec> columns = moved_columns(model_.graph());
  const bool binary = loss.op == "binary_cross_entropy_with_logits";
  double total = 0;
  int64_t counted = 0, correct = 0;
  std::vector<float> scores, labels;  // binary: the whole set's, as the AUC ranks them all at once
  // Distributed, rank r scores samples r, r + N, ... (each once: no padding) and the sums
  // and scores are the whole set's.
  std::vector<int64_t> mine, indices;
  Allocator& memory = model_.batch_memory();  // as fit()'s batches
  for (int64_t i = rank(); i < data.size(); i += ranks()) mine.push_back(i);
  for (size_t start = 0; start < mine.size(); start += static_cast<size_t>(spec_.batch)) {
    const size_t end = std::min(mine.size(), start + static_cast<size_t>(spec_.batch));
    indices.assign(mine.begin() + static_cast<std::ptrdiff_t>(start), mine.begin() + static_cast<std::ptrdiff_t>(end));
    LossValue v = model_.evaluate_loss(to_model_layout(data.gather(indices, memory), columns, memory));
    // back to a sum, so that the mean is over samples, not batches
    total += loss.reduction == "mean" ? v.loss * v.counted : v.loss;
    counted += v.counted;
    correct += v.correct;
    scores.insert(scores.end(), v.scores.begin(), v.scores.end());
    labels.insert(labels.end(), v.labels.begin(), v.labels.end());
  }
  if (ddp_) {
    std::vector<double> sums{total, static_cast<double>(counted), static_cast<double>(correct)};
    ddp_->sum(sums, "the validation metrics' sums");
    total = sums[0];
    counted = static_cast<int64_t>(sums[1]);
    correct = static_cast<int64_t>(sums[2]);
    if (binary) {
      scores = ddp_->gather(scores, "the validation scores for the AUC");
      labels = ddp_->gather(labels, "the validation labels for the AUC");
    }
  }
  result.samples = data.size();
  result.loss = counted > 0 ? total / counted : 0;
  if (classification && counted > 0) result.accuracy = static_cast<double>(correct) / counted;
  if (binary) result.auc = roc_auc(scores, labels);
  return result;
}

void Trainer::lay_schedule_over(int64_t run_steps) {
  auto say = [&](const std::string& text) {
    if (notice_ && rank() == 0) notice_(text);
  };
  const ScheduleConfig& s = spec_.schedule;
  const bool follows_total = s.name == "cosine" && s.total_steps == 0;
  if (total_steps_ == 0) {
    total_steps_ = run_steps;
  } else if (total_from_checkpoint_ && total_steps_ != run_steps) {
    // A resumed run that is longer (more epochs, more data) or shorter than its
    // checkpoint's: keeping the old length would run a cosine schedule's added steps at
    // min_lr (0 by default). The schedule is laid over the new run instead, from the step
    // the checkpoint reached, and the user is told, since the rate jumps there.
    if (follows_total)
      say("resumed a run of " + std::to_string(total_steps_) + " steps as one of " + std::to_string(run_steps) +
          ": the cosine schedule now spans " + std::to_string(run_steps) + " steps, so the learning rate goes from " +
          short_number(scheduled_lr(s, spec_.optimizer.lr, step_, total_steps_)) + " to " +
          short_number(scheduled_lr(s, spec_.optimizer.lr, step_, run_steps)) + " at step " + std::to_string(step_ + 1));
    total_steps_ = run_steps;
  }
  total_from_checkpoint_ = false;
  if (s.name == "cosine" && s.total_steps > 0 && s.total_steps < run_steps)
    say("the cosine schedule's total_steps " + std::to_string(s.total_steps) + " ends before this run's " +
        std::to_string(run_steps) + " steps: steps " + std::to_string(s.total_steps + 1) + " to " +
        std::to_string(run_steps) + " run at min_lr " + short_number(s.min_lr));
}

void Trainer::fit(const Dataset& train, const Dataset* validation, const std::string& checkpoint_path,
                  const std::function<void(const EpochReport&)>& on_epoch, const ProgressFn& on_progress) {
  const std::vector<ColumnSpec> columns = moved_columns(model_.graph());
  auto data = std::make_shared<const Dataset>(train);
  // a step takes `accumulate` micro-batches; distributed, from this rank's share
  BatchLoader loader(data, spec_.batch * spec_.accumulate, spec_.shuffle, spec_.drop_last, spec_.seed);
  Allocator& batch_memory = model_.batch_memory();  // pinned on GPUs: each batch goes up in one transfer
  loader.gather_into(batch_memory);
  if (ddp_) {
    ddp_->check_same("training samples", std::to_string(train.size()));
    loader.shard(rank(), ranks());
  }
  if (loader.batches_per_epoch() == 0)
    throw UserError("no batches: " + std::to_string(train.size()) + " training samples with batch " +
                    std::to_string(spec_.batch) + (spec_.accumulate > 1 ? " x accumulate " + std::to_string(spec_.accumulate) : "") +
                    (ranks() > 1 ? " on each of " + std::to_string(ranks()) + " ranks" : "") +
                    (spec_.drop_last ? " and drop_last" : ""));
  lay_schedule_over(spec_.epochs * loader.batches_per_epoch());
  {  // fixed chunk_sizes against every batch this run feeds, before its first step
    const int64_t step_batch = spec_.batch * spec_.accumulate;
    // distributed, a rank's share of the training set is the loader's: its full batches count
    const int64_t training = ranks() == 1 ? train.size() : loader.batches_per_epoch() * step_batch;
    std::vector<PlannedBatch> batches = planned_batches(training, spec_.batch, spec_.accumulate, spec_.drop_last, "training");
    if (validation && validation->size() > 0) {
      const int64_t mine = (validation->size() - rank() + ranks() - 1) / ranks();  // evaluate()'s share
      for (PlannedBatch& b : planned_batches(mine, spec_.batch, 1, false, "validation")) batches.push_back(std::move(b));
    }
    check_chunk_sizes(model_.graph(), batches);
  }
  for (; epoch_ < spec_.epochs;) {
    auto start = std::chrono::steady_clock::now();
    loader.start_epoch(epoch_);
    // The epoch's loss weights each step's by its samples (a mean loss): a short last
    // batch counts by its size, and the result is the mean per-sample loss. A sum loss's
    // step already adds its samples, so its steps count alike.
    const bool by_samples = model_.graph().loss->reduction == "mean";
    double loss_sum = 0, weight_sum = 0;
    int64_t batches = 0, samples = 0;
    std::vector<double> step_weights;
    EpochReport report;
    const int64_t skipped_before = skipped_steps_;
    // Each step is given the next batch of the epoch, which it may start on (step(batch, next)).
    struct Loaded {
      int64_t samples = 0;  // before the layout moves the sample dimension
      TensorMap batch;
    };
    auto load = [&]() -> std::optional<Loaded> {
      std::optional<TensorMap> b = loader.next();
      if (!b) return std::nullopt;
      const int64_t n = b->begin()->second.size(0);
      return Loaded{n, to_model_layout(std::move(*b), columns, batch_memory)};
    };
    std::optional<Loaded> next = load();
    while (next) {
      const Loaded current = std::move(*next);
      next = load();
      const int64_t n = current.samples;
      samples += n;
      last_samples_ = n * ranks();
      report.step_losses.push_back(step(current.batch, next ? &next->batch : nullptr));
      step_weights.push_back(by_samples ? static_cast<double>(n) : 1.0);
      loss_sum += step_weights.back() * report.step_losses.back();
      weight_sum += step_weights.back();
      ++batches;
      if (on_progress) on_progress(batches, loader.batches_per_epoch(), loss_sum / weight_sum);
    }
    if (ddp_) {  // each step's loss over the whole job: the mean of the ranks'
      ddp_->sum(report.step_losses, "the epoch's step losses");
      for (double& l : report.step_losses) l /= ranks();
      loss_sum = 0;
      for (size_t i = 0; i < report.step_losses.size(); ++i) loss_sum += step_weights[i] * report.step_losses[i];
      samples *= ranks();  // every rank's share is the same size
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.epoch = epoch_;
    report.train_loss = weight_sum > 0 ? loss_sum / weight_sum : 0;
    report.seconds = seconds;
    report.samples_per_second = samples / std::max(seconds, 1e-9);
    report.skipped_steps = skipped_steps_ - skipped_before;
    ++epoch_;
    if (validation && validation->size() > 0) report.validation = evaluate(*validation);
    if (!checkpoint_path.empty()) {
      save_checkpoint(checkpoint_path);
      if (on_checkpoint_) on_checkpoint_(epoch_);
    }
    if (on_epoch) on_epoch(report);
    if (stop_after_epoch_) {
      stop_after_epoch_ = false;
      break;
    }
  }
}

size_t Trainer::optimizer_state_bytes() const {
  size_t bytes = 0;
  for (const auto& [name, t] : optimizer_->state())
    if (name != "step") bytes += t.nbytes();
  return bytes;
}

CheckpointMetadata Trainer::checkpoint_metadata() const {
  return {model_.graph().name, epoch_, step_, total_steps_, spec_.seed, spec_.optimizer.name,
          spec_.optimizer.lr, spec_.batch, spec_.epochs, spec_.accumulate, ranks()};
}

ResumingRun Trainer::resuming_run() const {
  return {checkpoint_metadata(), scales_loss(), spec_.loss_scaling.growth_interval};
}

void Trainer::save_checkpoint(const std::string& path) const {
  // Every rank sends its share when the state is sharded; otherwise rank 0 alone holds
  // what it writes, and the others have nothing to do.
  if (!sharding_ && rank() != 0) return;
  CheckpointContents contents;
  contents.optimizer = optimizer_->state();
  if (sharding_)
    contents.optimizer =
        sharding_->gather_state(contents.optimizer, "the optimizer state's shares for checkpoint " + path);
  if (rank() != 0) return;  // every rank holds the same weights and state
  contents.weights = model_.parameters();
  if (scales_loss()) {
    contents.loss_scaler.emplace("scale", Tensor::from_vector<float>({1}, {scaler_.scale()}));
    contents.loss_scaler.emplace("growth_tracker", Tensor::from_vector<int64_t>({1}, {scaler_.growth_tracker()}));
    contents.loss_scaler.emplace("skipped_steps", Tensor::from_vector<int64_t>({1}, {skipped_steps_}));
  }
  contents.metadata = checkpoint_metadata();
  write_checkpoint(path, contents);
}

void Trainer::load_checkpoint(const std::string& path) {
  auto [tensors, meta] = read_checkpoint(path, resuming_run(), ddp_.get());
  try {
    apply_checkpoint(path, checked_checkpoint(std::move(tensors), meta, path, resuming_run()));
  } catch (const JobError&) {
    throw;
  } catch (const UserError& e) {
    if (!ddp_) throw;
    throw JobError(e.what());  // every rank judged the same file alike
  }
}

void Trainer::apply_checkpoint(const std::string& path, CheckpointContents checkpoint) {
  model_.set_weights(checkpoint.weights, path);
  TensorMap& state = checkpoint.optimizer;
  if (sharding_) {  // this rank's share: "step" and "<parameter>.<buffer>" of the parameters it updates
    const std::set<std::string> mine(updated_.names.begin(), updated_.names.end());
    std::erase_if(state, [&](const auto& entry) {
      return entry.first != "step" && !mine.count(entry.first.substr(0, entry.first.rfind('.')));
    });
  }
  try {
    optimizer_->load_state(state);
  } catch (const UserError& e) {
    throw UserError(path + ": " + e.what());
  }
  const CheckpointMetadata& m = checkpoint.metadata;
  epoch_ = m.epoch;
  step_ = m.step;
  total_steps_ = m.total_steps;
  total_from_checkpoint_ = true;
  const TensorMap& scaler = checkpoint.loss_scaler;
  if (!scaler.empty()) {
    scaler_.restore(scaler.at("scale").data<float>()[0], scaler.at("growth_tracker").data<int64_t>()[0]);
    skipped_steps_ = scaler.at("skipped_steps").data<int64_t>()[0];
  }
}

namespace {

/// Ids an embedding looks up must lie within its table: the data is checked when it loads,
/// naming the file and line, not in the middle of a shuffled batch of a training step.
void bound_by_tables(const Graph& graph, const GraphInput& decl, ColumnSpec& c) {
  for (const Node& node : graph.nodes)
    for (size_t slot = 0; slot < node.inputs.size(); ++slot) {
      if (node.inputs[slot] != decl.value || !node.schema || !node.schema->index_bound) continue;
      bool is_offsets = false;
      std::optional<int64_t> rows = node.schema->index_bound(static_cast<int>(slot), node.attrs, &is_offsets);
      if (is_offsets || !rows) continue;
      if (c.high && *c.high <= *rows) continue;  // a declared high or a smaller table bounds it already
      c.high = *rows;
      c.bound_by = "the table of layer '" + node.path + "' (" + node.op + ", num_embeddings " +
                   std::to_string(*rows) + ")";
    }
}

}  // namespace

std::vector<ColumnSpec> data_columns(const Graph& graph) {
  std::vector<ColumnSpec> columns;
  auto add = [&](const GraphInput& decl) {
    const TensorType& type = graph.values[decl.value].type;
    ColumnSpec c;
    c.name = decl.name;
    c.dtype = type.dtype;
    c.high = decl.high;
    // the one symbolic dimension is the batch (graph/batch_dim.h), and it must be a plain
    // symbol; the data holds samples first either way (to_model_layout)
    for (const Dim& d : type.shape)
      if (d.is_constant()) c.sample_shape.push_back(d.constant());
    if (c.sample_shape.size() == type.shape.size())
      throw UserError("'" + decl.name + "' has shape " + sym_shape_str(type.shape) +
                      ": to be fed from data one dimension must be the batch symbol, e.g. [batch, 64]");
    const std::optional<int> batch_dim = batch_dim_of(type.shape);
    if (!batch_dim || !type.shape[static_cast<size_t>(*batch_dim)].as_symbol())
      throw UserError("'" + decl.name + "' has shape " + sym_shape_str(type.shape) +
                      ": to be fed from data exactly one dimension may be symbolic (the batch); give the others "
                      "fixed sizes");
    c.batch_dim = *batch_dim;
    if (c.dtype == DType::int64) bound_by_tables(graph, decl, c);
    if (graph.loss && graph.loss->target == decl.value && c.dtype == DType::int64) {
      if (!c.high) c.high = graph.values[graph.loss->input].type.shape[1].constant();
      // class indices may also be the ignored one (masked-token targets are -100 elsewhere)
      if (graph.loss->op == "cross_entropy" || graph.loss->op == "nll_loss") c.ignored = graph.loss->ignore_index;
    }
    columns.push_back(std::move(c));
  };
  for (const GraphInput& in : graph.inputs) add(in);
  for (const GraphInput& t : graph.targets) add(t);
  return columns;
}

}  // namespace tandem
