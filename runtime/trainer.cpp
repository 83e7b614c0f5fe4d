#include "runtime/trainer.h"

#include <chrono>
#include <cmath>

#include "backends/sim/sim_trace.h"
#include "runtime/checkpoint_metadata.h"
#include "runtime/io/safetensors.h"

namespace tandem {
namespace {

uint64_t step_seed(uint64_t seed, int64_t step) {
  return seed * 0xd1b54a32d192ed03ULL + static_cast<uint64_t>(step) * 0x9e3779b97f4a7c15ULL + 1;
}

/// The inputs and targets whose batch is not their first dimension (those with exactly
/// one symbol, elsewhere: data_columns' rule), for to_model_layout. Unlike data_columns it
/// refuses nothing: a Dataset the caller built for a model with other symbols is fed as is.
std::vector<ColumnSpec> moved_columns(const Graph& graph) {
  std::vector<ColumnSpec> out;
  auto add = [&](const GraphInput& decl) {
    const SymShape& shape = graph.values[decl.value].type.shape;
    int symbolic = -1, count = 0;
    for (size_t d = 0; d < shape.size(); ++d)
      if (!shape[d].is_constant()) symbolic = static_cast<int>(d), ++count;
    if (count != 1 || symbolic == 0) return;
    ColumnSpec c;
    c.name = decl.name;
    c.batch_dim = symbolic;
    out.push_back(std::move(c));
  };
  for (const GraphInput& in : graph.inputs) add(in);
  for (const GraphInput& t : graph.targets) add(t);
  return out;
}

}  // namespace

Trainer::Trainer(Model& model, TrainingSpec spec)
    : model_(model), spec_(std::move(spec)), optimizer_(make_optimizer(spec_.optimizer)) {
  if (!model_.graph().loss)
    throw UserError("model '" + model_.graph().name + "' has no loss: add loss: {op: ..., target: ...} to train it");
  // what has a gradient is what the optimizer updates: buffers (running statistics) are
  // not. A row gradient (sparse: true) has no dense tensor: its rows hold it.
  const TensorMap& dense_grads = model_.gradients();
  for (auto& [name, rows] : model_.gradient_rows()) {
    auto dense = dense_grads.find(name);
    if (dense == dense_grads.end() && !optimizer_->takes_row_gradients())
      throw UserError("parameter '" + name + "' belongs to a table declared sparse: true, whose gradient is kept " +
                      "as the rows its batches looked up; only sgd without momentum and weight_decay can " +
                      "update such a gradient, and this model trains with " + spec_.optimizer.name +
                      (spec_.optimizer.name == "sgd" ? " with momentum or weight_decay" : "") +
                      ". Drop sparse: true to give the table a dense gradient (torch's optimizers refuse " +
                      "sparse gradients likewise)");
    names_.push_back(name);
    params_.push_back(model_.parameters().at(name));
    grads_.push_back(dense == dense_grads.end() ? Tensor() : dense->second);
    rows_.push_back(&rows);
  }
}

double Trainer::current_lr() const {
  return scheduled_lr(spec_.schedule, spec_.optimizer.lr, step_, std::max<int64_t>(total_steps_, 1));
}

double Trainer::step(const TensorMap& batch) {
  // Zeroing, clipping and the update read the rows backward touched: on an embedding table
  // only its lookups' rows where that gives the dense result's bits (core/touched_rows.h).
  {
    HostSpan span("gradients zeroed");
    model_.zero_gradients();
  }
  LossValue loss = model_.loss_and_backward(batch, step_seed(spec_.seed, step_));
  if (!std::isfinite(loss.loss))  // before the update: the weights stay those of the last good step
    throw UserError("step " + std::to_string(step_ + 1) + " (epoch " + std::to_string(epoch_ + 1) +
                    "): the training loss is " + (std::isnan(loss.loss) ? "NaN" : loss.loss > 0 ? "+inf" : "-inf") +
                    "; the run stopped before updating the weights. Lower the learning rate (--lr), clip gradients "
                    "(train: clip_grad_norm), or check the data");
  HostSpan span("optimizer step");
  if (spec_.clip_grad_norm) clip_grad_norm(grads_, *spec_.clip_grad_norm, rows_);
  optimizer_->step_rows(params_, grads_, rows_, current_lr());
  model_.parameters_changed();
  ++step_;
  return loss.loss;
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
  std::vector<int64_t> indices;
  for (int64_t start = 0; start < data.size(); start += spec_.batch) {
    indices.clear();
    for (int64_t i = start; i < std::min(data.size(), start + spec_.batch); ++i) indices.push_back(i);
    LossValue v = model_.evaluate_loss(to_model_layout(data.gather(indices), columns));
    // back to a sum, so that the mean is over samples, not batches
    total += loss.reduction == "mean" ? v.loss * v.counted : v.loss;
    counted += v.counted;
    correct += v.correct;
    scores.insert(scores.end(), v.scores.begin(), v.scores.end());
    labels.insert(labels.end(), v.labels.begin(), v.labels.end());
  }
  result.samples = data.size();
  result.loss = counted > 0 ? total / counted : 0;
  if (classification && counted > 0) result.accuracy = static_cast<double>(correct) / counted;
  if (binary) result.auc = roc_auc(scores, labels);
  return result;
}

void Trainer::fit(const Dataset& train, const Dataset* validation, const std::string& checkpoint_path,
                  const std::function<void(const EpochReport&)>& on_epoch, const ProgressFn& on_progress) {
  const std::vector<ColumnSpec> columns = moved_columns(model_.graph());
  auto data = std::make_shared<const Dataset>(train);
  BatchLoader loader(data, spec_.batch, spec_.shuffle, spec_.drop_last, spec_.seed);
  if (loader.batches_per_epoch() == 0)
    throw UserError("no batches: " + std::to_string(train.size()) + " training samples with batch " +
                    std::to_string(spec_.batch) + (spec_.drop_last ? " and drop_last" : ""));
  if (total_steps_ == 0) total_steps_ = spec_.epochs * loader.batches_per_epoch();
  for (; epoch_ < spec_.epochs;) {
    auto start = std::chrono::steady_clock::now();
    loader.start_epoch(epoch_);
    double loss_sum = 0;
    int64_t batches = 0, samples = 0;
    EpochReport report;
    while (auto batch = loader.next()) {
      samples += batch->begin()->second.size(0);  // before the layout moves the sample dimension
      report.step_losses.push_back(step(to_model_layout(std::move(*batch), columns)));
      loss_sum += report.step_losses.back();
      ++batches;
      if (on_progress) on_progress(batches, loader.batches_per_epoch(), loss_sum / batches);
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.epoch = epoch_;
    report.train_loss = loss_sum / std::max<int64_t>(batches, 1);
    report.seconds = seconds;
    report.samples_per_second = samples / std::max(seconds, 1e-9);
    ++epoch_;
    if (validation && validation->size() > 0) report.validation = evaluate(*validation);
    if (!checkpoint_path.empty()) save_checkpoint(checkpoint_path);
    if (on_epoch) on_epoch(report);
  }
}

void Trainer::save_checkpoint(const std::string& path) const {
  TensorMap tensors;
  for (const auto& [name, p] : model_.parameters()) tensors.emplace(name, p);
  for (auto& [name, t] : optimizer_->state(names_)) tensors.emplace("optimizer." + name, t);
  write_safetensors(path, tensors,
                    checkpoint_metadata_map({model_.graph().name, epoch_, step_, total_steps_, spec_.seed,
                                             spec_.optimizer.name, spec_.optimizer.lr, spec_.batch, spec_.epochs}));
}

void Trainer::load_checkpoint(const std::string& path) {
  std::map<std::string, std::string> meta = read_safetensors_metadata(path);
  if (!is_checkpoint_metadata(meta))
    throw UserError(path + ": not a Tandem checkpoint (no training state); to start from these weights use --weights");
  // every field checked before anything is changed: a refused checkpoint leaves the trainer as it was
  const CheckpointMetadata m = parse_checkpoint_metadata(meta, path);
  if (m.model != model_.graph().name)
    throw UserError(path + ": a checkpoint of model '" + m.model + "', not of '" + model_.graph().name + "'");
  if (m.seed != spec_.seed || m.batch != spec_.batch || m.optimizer != spec_.optimizer.name)
    throw UserError(path + ": the checkpoint was trained with seed " + std::to_string(m.seed) + ", batch " +
                    std::to_string(m.batch) + " and optimizer " + m.optimizer +
                    "; resume with the same settings to continue the same run");
  TensorMap tensors = read_safetensors(path);
  TensorMap weights, state;
  for (auto& [name, t] : tensors) {
    if (name.starts_with("optimizer.")) state.emplace(name.substr(10), t);
    else weights.emplace(name, t);
  }
  model_.set_weights(weights, path);
  try {
    optimizer_->load_state(state, names_, params_);
  } catch (const UserError& e) {
    throw UserError(path + ": " + e.what());
  }
  epoch_ = m.epoch;
  step_ = m.step;
  total_steps_ = m.total_steps;
}

std::vector<ColumnSpec> data_columns(const Graph& graph) {
  std::vector<ColumnSpec> columns;
  auto add = [&](const GraphInput& decl) {
    const TensorType& type = graph.values[decl.value].type;
    ColumnSpec c;
    c.name = decl.name;
    c.dtype = type.dtype;
    c.high = decl.high;
    // the one symbolic dimension is the batch: first ([batch, 64]) or not ([seq, batch] of a
    // sequence-first model); the data holds samples first either way (to_model_layout)
    int batch_dim = -1;
    for (size_t d = 0; d < type.shape.size(); ++d) {
      if (type.shape[d].is_constant()) {
        c.sample_shape.push_back(type.shape[d].constant());
      } else if (batch_dim >= 0 || !type.shape[d].as_symbol()) {
        throw UserError("'" + decl.name + "' has shape " + sym_shape_str(type.shape) +
                        ": to be fed from data exactly one dimension may be symbolic (the batch); give the others "
                        "fixed sizes");
      } else {
        batch_dim = static_cast<int>(d);
      }
    }
    if (batch_dim < 0)
      throw UserError("'" + decl.name + "' has shape " + sym_shape_str(type.shape) +
                      ": to be fed from data one dimension must be the batch symbol, e.g. [batch, 64]");
    c.batch_dim = batch_dim;
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
