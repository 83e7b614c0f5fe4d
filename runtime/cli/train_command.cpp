// tandem train MODEL.yaml: train on a dataset (or time training steps with --bench-steps).
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <set>
#include <nlohmann/json.hpp>

#include "graph/pipeline_check.h"
#include "runtime/cli/best_epoch.h"
#include "runtime/cli/bind_option.h"
#include "runtime/cli/commands.h"
#include "runtime/cli/device_report_output.h"
#include "runtime/cli/distributed_flags.h"
#include "runtime/cli/interrupt_note.h"
#include "runtime/cli/output_paths.h"
#include "runtime/cli/placement_options.h"
#include "runtime/cli/precision_option.h"
#include "runtime/cli/progress_bar.h"
#include "runtime/cli/slow_step_note.h"
#include "runtime/cli/trace_option.h"
#include "runtime/cli/training_log.h"
#include "core/readable_file.h"
#include "runtime/devices/device_registry.h"
#include "runtime/io/safetensors.h"
#include "runtime/trainer.h"

namespace tandem::cli {
namespace {

struct TrainOptions {
  std::string precision;  // --precision, checked by parse_precision_option
  std::string model, data, save, resume, weights, optimizer, save_weights;
  std::optional<bool> shuffle, drop_last, overlap_next_batch, update_tables_in_backward;
  std::optional<int64_t> epochs, batch, accumulate, micro_batches;
  std::optional<double> lr, validation_split;
  std::optional<uint64_t> seed;
  std::vector<std::string> binds;
  int bench_steps = 0;
  bool no_save = false;
  bool json = false;
  bool report = false;
  bool no_progress = false;  // --no-progress
  std::string trace;  // --trace
  std::string keep_best;             // --keep-best METRIC
  std::optional<int64_t> early_stop;  // --early-stop PATIENCE
  std::string log_dir;    // --log-dir
  int64_t log_every = 0;  // --log-every; 0: by the clock (runtime/cli/training_log.h)
  PlacementFlags placement;
  DistributedFlags distributed;
};

TrainingSpec training_spec(const Graph& graph, const TrainOptions& o) {
  TrainingSpec spec = graph.training.value_or(TrainingSpec{});
  if (o.epochs) spec.epochs = *o.epochs;
  if (o.batch) spec.batch = *o.batch;
  if (o.accumulate) spec.accumulate = *o.accumulate;
  if (o.micro_batches) spec.micro_batches = *o.micro_batches;
  if (o.seed) spec.seed = *o.seed;
  if (!o.keep_best.empty()) spec.keep_best = o.keep_best;
  if (o.early_stop) spec.early_stop = *o.early_stop;
  if (!o.optimizer.empty() && o.optimizer != spec.optimizer.name) {
    spec.optimizer = optimizer_defaults(o.optimizer);  // another optimizer: its own defaults, not the YAML's
  }
  if (o.lr) spec.optimizer.lr = *o.lr;
  if (o.shuffle) spec.shuffle = *o.shuffle;
  if (o.drop_last) spec.drop_last = *o.drop_last;
  if (o.overlap_next_batch) spec.overlap_next_batch = *o.overlap_next_batch;
  if (o.update_tables_in_backward) spec.update_tables_in_backward = *o.update_tables_in_backward;
  if (o.validation_split) spec.validation_split = *o.validation_split;
  if (!o.data.empty()) {
    DataSpec d = spec.data.value_or(DataSpec{});
    d.path = o.data;  // relative to the working directory, as any flag's path
    d.named_at = "";
    d.format = "";
    spec.data = d;
  }
  for (const auto& [flag, value] : {std::pair<const char*, int64_t>{"--epochs", spec.epochs}, {"--batch", spec.batch},
                                     {"--accumulate", spec.accumulate}, {"--micro-batches", spec.micro_batches}})
    if (value < 1) throw UserError(std::string(flag) + " must be at least 1, got " + std::to_string(value));
  if (o.micro_batches && spec.micro_batches > 1)
    if (const Node* node = layer_refusing_micro_batches(graph))
      throw UserError(micro_batch_refusal(*node, "--micro-batches " + std::to_string(spec.micro_batches)));
  if (spec.validation_split < 0 || spec.validation_split >= 1) throw UserError("--validation-split must be within [0, 1)");
  if (spec.optimizer.lr < 0) throw UserError("--lr must not be negative");
  return spec;
}

/// "fp32", "bf16", or "bf16 (some layers fp32)": the precision of the model's matrix work.
std::string precision_text(const Graph& graph) {
  std::string text(precision_name(graph.precision));
  std::set<std::string_view> others;
  for (const Node& node : graph.nodes)
    if (op_runs_in_reduced_precision(node.op) && layer_precision(graph, node) != graph.precision)
      others.insert(precision_name(layer_precision(graph, node)));
  std::string listed;
  for (std::string_view p : others) listed += (listed.empty() ? "" : " or ") + std::string(p);
  return others.empty() ? text : text + " (some layers " + listed + ")";
}

std::string batch_text(const TrainingSpec& spec, const Trainer& trainer);

// Times `steps` optimizer steps on two random batches in turn: the training benchmark's half.
int bench_training(Model& model, const TrainingSpec& spec, const TrainOptions& o, std::shared_ptr<ProcessGroup> group) {
  Bindings b = parse_bind_options(o.binds, model.graph());
  b["batch"] = spec.batch;
  TensorMap drawn = model.random_inputs(b, spec.seed);
  drawn.merge(model.random_targets(b, spec.seed));
  TensorMap batch;  // where a data loader gathers batches (pinned memory for GPUs), as fit() does
  for (const auto& [name, t] : drawn) batch.emplace(name, t.clone(model.batch_memory()));
  const Plan predicted = model.plan_for(b, /*training=*/true);  // the report's prediction
  Trainer trainer(model, spec);
  trainer.distribute(std::move(group), distributed_options(o.distributed));  // each rank its own random batch
  trainer.set_total_steps(o.bench_steps + 3);
  // two batches in turn, each step given the other as its next (Trainer::step(batch, next)),
  // as fit() gives each step the next of its epoch
  TensorMap other;
  {
    TensorMap drawn_other = model.random_inputs(b, spec.seed + 1);
    drawn_other.merge(model.random_targets(b, spec.seed + 1));
    for (const auto& [name, t] : drawn_other) other.emplace(name, t.clone(model.batch_memory()));
  }
  const TensorMap* batches[2] = {&batch, &other};
  for (int i = 0; i < 3; ++i) trainer.step(*batches[i % 2], batches[(i + 1) % 2]);
  std::vector<double> ms;
  double loss = 0;
  for (int i = 3; i < o.bench_steps + 3; ++i) {
    auto start = std::chrono::steady_clock::now();
    loss = trainer.step(*batches[i % 2], i + 1 < o.bench_steps + 3 ? batches[(i + 1) % 2] : nullptr);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  if (trainer.rank() != 0) return 0;
  nlohmann::json j{{"model", model.graph().name},
                   {"batch", spec.batch},
                   {"global_batch", trainer.global_batch()},
                   {"ranks", trainer.ranks()},
                   {"optimizer_state_bytes", trainer.optimizer_state_bytes()},
                   {"loss", loss},
                   {"precision", precision_text(model.graph())},
                   {"timing", {{"repeat", o.bench_steps}, {"median_ms", ms[ms.size() / 2]}, {"min_ms", ms.front()}}},
                   {"peak_bytes", cpu_allocator().peak_bytes()}};
  if (model.placed() || o.report) j["devices"] = devices_json(model.device_totals(), predicted);
  if (trainer.scales_loss()) {
    j["skipped_steps"] = trainer.skipped_steps();  // warm-up included
    j["loss_scale"] = trainer.loss_scale();
  }
  j["event"] = "summary";
  if (o.json) fmt::print("{}\n", j.dump());  // one line, as train's summary
  else fmt::print("training step ({}, {}): median {:.4f} ms, min {:.4f} ms over {} steps; peak host memory {:.1f} MiB\n",
                  precision_text(model.graph()), batch_text(spec, trainer), ms[ms.size() / 2], ms.front(), o.bench_steps,
                  cpu_allocator().peak_bytes() / double(1 << 20));
  if (o.report && !o.json) print_device_report(model.device_totals(), predicted, "every step, warm-up included");
  return 0;
}

/// "batch 32", or what a step takes in all: "batch 32 per rank x 4 ranks = global batch 128".
std::string batch_text(const TrainingSpec& spec, const Trainer& trainer) {
  std::string text = fmt::format("batch {}", spec.batch);
  if (spec.accumulate > 1) text += fmt::format(" x accumulate {}", spec.accumulate);
  if (spec.micro_batches > 1) text += fmt::format(" in {} pipelined micro-batches", spec.micro_batches);
  if (trainer.ranks() > 1) text += fmt::format(" per rank x {} ranks", trainer.ranks());
  if (trainer.global_batch() != spec.batch) text += fmt::format(" = global batch {}", trainer.global_batch());
  return text;
}

/// Where the run writes its checkpoints: --save, else the checkpoint it resumes (a run
/// continued goes on saving where it was saved), unless --no-save.
std::string checkpoint_path(const TrainOptions& o) {
  if (o.no_save) return "";
  return o.save.empty() ? o.resume : o.save;
}

/// Every file the run will write, checked before the weights are made or the data read.
void check_train_outputs(const TrainOptions& o, const TrainingSpec& spec) {
  const std::string save = checkpoint_path(o);
  const std::string save_flag = o.save.empty() ? "--resume (the checkpoint it goes on saving)" : "--save";
  // the checkpoint to resume is read first: one that cannot be is reported as a read error
  if (!o.resume.empty()) ReadableFile{o.resume};
  std::vector<NamedPath> inputs{{"the model file", o.model}, {"--weights", o.weights}};
  if (spec.data) inputs.push_back({"the training data", spec.data->path});
  if (save != o.resume) inputs.push_back({"--resume", o.resume});
  if (!spec.keep_best.empty() && save.empty())
    throw UserError(std::string(o.keep_best.empty() ? "the model's train: keep_best" : "--keep-best") +
                    " keeps the best epoch's checkpoint beside the run's (CKPT.best.safetensors): give --save CKPT");
  check_output_paths({{save_flag, save}, {"--save-weights", o.save_weights}, {"--trace", o.trace},
                      {"--keep-best (the best epoch's checkpoint)", spec.keep_best.empty() ? "" : best_checkpoint_path(save)}},
                     inputs);
  check_output_directory({"--log-dir", o.log_dir});
}

/// A run resumed from a checkpoint that has trained every epoch asked for: said, not done
/// silently. Exit status 0, as a job script that resumes whatever it finds wants: the
/// run is complete.
int nothing_left(const TrainOptions& o, const TrainingSpec& spec, const Trainer& trainer, bool speaks,
                 const std::string& model_name) {
  if (!speaks) return 0;
  const std::string text =
      fmt::format("nothing left to train: the checkpoint {} has trained {} epoch{} ({} steps) and this run asks for "
                  "{}{}; give --epochs N with N above {} to train further",
                  o.resume, trainer.epochs_done(), trainer.epochs_done() == 1 ? "" : "s", trainer.steps_done(),
                  spec.epochs, o.epochs ? " (--epochs)" : " (the model's train: epochs)", trainer.epochs_done());
  if (o.json)
    fmt::print("{}\n", nlohmann::json{{"event", "summary"}, {"model", model_name},
                                      {"steps", 0}, {"epochs", nlohmann::json::array()},
                                      {"resumed_at_step", trainer.steps_done()}, {"notes", {text}}}
                           .dump());
  else
    fmt::print("note: {}\n", text);
  return 0;
}

int train_as_rank(const TrainOptions& o, std::shared_ptr<ProcessGroup> group) {
  take_gpu_share(*group, o.placement);  // before anything starts CUDA
  Model model = Model::load(o.model, Model::Start::weights_follow);  // drawn from spec.seed or loaded below
  if (auto precision = parse_precision_option(o.precision)) model.set_precision(*precision);
  apply_placement_flags(model, o.placement, o.report);
  TrainingSpec spec = training_spec(model.graph(), o);
  if (o.no_save && !o.save.empty()) throw UserError("--no-save and --save " + o.save + " contradict each other: give one");
  if (o.bench_steps > 0 && (!o.log_dir.empty() || o.log_every > 0))  // a timing has no run to follow
    throw UserError(std::string(o.log_dir.empty() ? "--log-every" : "--log-dir") +
                    " follows a training run; --bench-steps times steps and logs none: drop one of them");
  if (group->rank() == 0) check_train_outputs(o, spec);  // rank 0 alone writes
  start_trace(o.trace, group->rank(), group->size());   // each rank its own file
  const bool first_rank = group->rank() == 0;  // the slow steps' notes: one rank says them for all
  std::vector<std::string> weight_notes;      // said once the trainer knows which rank speaks
  if (!o.weights.empty()) {
    SlowStepNote note("loading weights " + file_with_size(o.weights), first_rank);
    weight_notes = model.load_weights(o.weights);
  } else {
    SlowStepNote note("initialising the weights of '" + model.graph().name + "'", first_rank);
    model.init_parameters(spec.seed);
  }
  if (o.bench_steps > 0) return bench_training(model, spec, o, std::move(group));
  if (!o.binds.empty())  // training takes its shapes from the data
    throw UserError("--bind applies to --bench-steps only (training takes every size from its data); drop it, or add "
                    "--bench-steps N to time steps on random inputs of those sizes");
  Trainer trainer(model, spec);  // first: it says when the model has no loss
  trainer.distribute(std::move(group), distributed_options(o.distributed));
  const bool speaks = trainer.rank() == 0;  // of a distributed job, rank 0 alone prints
  // A bar on a terminal, unless --json or --no-progress. mpirun hands its ranks a terminal
  // even when its own output goes to a file: no bar there, the epochs' lines only.
  std::optional<ProgressBar> bar;
  if (speaks && trainer.ranks() == 1 && !o.json && !o.no_progress && isatty(STDOUT_FILENO))
    bar.emplace(stdout, spec.epochs);
  nlohmann::json notes = nlohmann::json::array();
  trainer.set_notice([&](const std::string& text) {
    if (o.json) return notes.push_back(text);
    if (bar) bar->clear();
    fmt::print("note: {}\n", text);
  });
  spec.seed = trainer.spec().seed;  // rank 0's, should the ranks have been given others
  if (trainer.distributed() && !trainer.distributed()->seed_note().empty())
    weight_notes.push_back(trainer.distributed()->seed_note());
  if (speaks) {
    for (const std::string& note : weight_notes) {
      if (o.json) notes.push_back(note);
      else fmt::print("note: {}\n", note);
    }
  }
  if (!spec.data) throw UserError("no training data: give --data FILE or a data: entry in the model's train: section");
  // a device the machine lacks is refused before the data loads; the report sets this
  // plan's predicted peaks beside the measured ones
  const Plan predicted = model.plan_for({{"batch", spec.batch}}, /*training=*/true);
  Dataset all = [&] {
    SlowStepNote note("reading the training data " + file_with_size(spec.data->path), speaks);
    return load_dataset(*spec.data, data_columns(model.graph()));
  }();
  auto [train, validation] = split_dataset(all, spec.validation_split, spec.seed);
  std::optional<BestEpoch> best;  // --keep-best, --early-stop: refused before training without a validation set
  if (!spec.keep_best.empty() || spec.early_stop > 0)
    best.emplace(spec.keep_best.empty() ? "val_loss" : spec.keep_best, model.graph().loss->op, validation.size(),
                 spec.keep_best.empty() ? (o.early_stop ? "--early-stop" : "train: early_stop")
                                        : (o.keep_best.empty() ? "train: keep_best" : "--keep-best"));
  std::optional<int64_t> stopped_early;  // the epoch after which --early-stop ended the run
  if (!o.resume.empty()) {
    SlowStepNote note("loading the checkpoint " + file_with_size(o.resume), speaks);
    trainer.load_checkpoint(o.resume);
  }
  const int64_t steps_before = trainer.steps_done();  // the checkpoint's: the summary counts this run's
  const std::string save = checkpoint_path(o);
  if (speaks && !save.empty()) remove_stale_temporaries(save);  // a killed run's, even if this one writes none
  if (!o.resume.empty() && trainer.epochs_done() >= spec.epochs) return nothing_left(o, spec, trainer, speaks, model.graph().name);
  // Ctrl-C or a scheduler's SIGTERM: where the run stopped and how to go on
  InterruptNote interrupted(speaks, save, resume_command(save, trainer.ranks()));
  const int64_t resumed_epochs = save == o.resume ? trainer.epochs_done() : 0;  // what `save` holds now
  interrupted.update(trainer.steps_done(), trainer.epochs_done() + 1, spec.epochs, resumed_epochs);

  // rank 0 alone follows the run; where no bar shows it, a log gets lines
  std::optional<TrainingLog> log;
  if (speaks)
    log.emplace(TrainingLogOptions{.json = o.json, .text_steps = !o.json && !bar, .every = o.log_every, .dir = o.log_dir,
                                   .resumed = !o.resume.empty(), .epochs = spec.epochs});
  if (speaks && !o.json)
    fmt::print("training '{}' on {} samples ({} for validation), {}, {} epoch{}, {} lr {}, precision {}{}\n",
               model.graph().name, train.size(), validation.size(), batch_text(spec, trainer), spec.epochs,
               spec.epochs == 1 ? "" : "s", spec.optimizer.name, spec.optimizer.lr, precision_text(model.graph()), o.resume.empty() ? "" : fmt::format(", resumed at epoch {}", trainer.epochs_done()));
  nlohmann::json epochs = nlohmann::json::array();
  auto run_start = std::chrono::steady_clock::now();
  int64_t checkpoint_epochs = resumed_epochs;
  ProgressFn progress;
  if (log && log->wants_steps())
    progress = [&](int64_t done, int64_t total, double) {
      log->step(trainer.epochs_done() + 1, trainer.steps_done(), done, total, trainer.last_loss(), trainer.last_lr(),
                trainer.last_samples());
    };
  if (bar)
    progress = [&, log_step = progress](int64_t done, int64_t total, double loss) {
      if (log_step) log_step(done, total, loss);
      bar->step(trainer.epochs_done() + 1, done, total, trainer.last_samples(), loss);
    };
  trainer.set_on_checkpoint([&](int64_t epochs_saved) {
    checkpoint_epochs = epochs_saved;
    interrupted.update(trainer.steps_done(), std::min(epochs_saved + 1, spec.epochs), spec.epochs, checkpoint_epochs);
  });
  progress = [&, step = progress](int64_t done, int64_t total, double loss) {
    interrupted.update(trainer.steps_done(), trainer.epochs_done() + 1, spec.epochs, checkpoint_epochs);
    if (step) step(done, total, loss);
  };
  auto on_epoch = [&](const EpochReport& r) {
    nlohmann::json e{{"epoch", r.epoch + 1}, {"train_loss", r.train_loss}, {"seconds", r.seconds},
                     {"samples_per_second", r.samples_per_second}, {"step_losses", r.step_losses}};
    std::string skipped;  // fp16 loss scaling: the steps whose gradients overflowed
    if (trainer.scales_loss()) {
      e["skipped_steps"] = r.skipped_steps;
      e["loss_scale"] = trainer.loss_scale();
      if (r.skipped_steps > 0) skipped = fmt::format("  {} skipped (loss scale {:g})", r.skipped_steps, trainer.loss_scale());
    }
    std::string val;
    if (r.validation) {
      e["validation_loss"] = r.validation->loss;
      val = fmt::format("  val loss {:.4f}", r.validation->loss);
      if (r.validation->accuracy) {
        e["validation_accuracy"] = *r.validation->accuracy;
        val += fmt::format("  val acc {:.2f}%", 100 * *r.validation->accuracy);
      }
      if (const auto& auc = r.validation->auc) {  // a binary loss: null and the reason when undefined
        e["validation_auc"] = auc->value ? nlohmann::json(*auc->value) : nlohmann::json(nullptr);
        if (!auc->value) e["validation_auc_undefined"] = auc->undefined;
        val += auc->value ? fmt::format("  val auc {:.4f}", *auc->value) : fmt::format("  val auc undefined ({})", auc->undefined);
      }
    }
    std::string best_note;
    if (best && r.validation) {
      const int64_t epoch = r.epoch + 1;
      if (best->improves(epoch, *r.validation) && !spec.keep_best.empty()) {
        trainer.save_checkpoint(best_checkpoint_path(save));  // every rank: a sharded state is gathered
        best_note = "  (best, kept)";
      }
      if (spec.early_stop > 0 && best->epochs_since_best(epoch) >= spec.early_stop && epoch < spec.epochs) {
        trainer.stop_after_epoch();
        stopped_early = epoch;
        best_note += fmt::format("\nearly stop: {} has not improved for {} epoch{}{}", best->metric(),
                                 spec.early_stop, spec.early_stop == 1 ? "" : "s",
                                 best->best_epoch() ? fmt::format(" (best {:.6g} at epoch {})", best->best_value(),
                                                                  *best->best_epoch())
                                                    : "");
      }
    }
    epochs.push_back(e);
    if (log) {
      nlohmann::json metrics = e;
      metrics.erase("step_losses");  // the summary has them; a line per epoch stays short
      log->epoch(std::move(metrics), trainer.steps_done());
    }
    if (o.json || !speaks) return;
    if (bar) bar->clear();
    fmt::print("epoch {:>3}/{}  loss {:.4f}{}  {:.0f} samples/s  {:.2f}s{}{}\n", r.epoch + 1, spec.epochs, r.train_loss,
               val, r.samples_per_second, r.seconds, skipped, best_note);
    if (bar) bar->start_epoch();  // after validation and the checkpoint: the next epoch's steps alone
  };
  if (bar) bar->start_epoch();  // the data is read: the first epoch starts now
  trainer.fit(train, &validation, save, on_epoch, progress);
  const int64_t steps = trainer.steps_done() - steps_before;
  if (!o.save_weights.empty() && speaks) model.save_weights(o.save_weights);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  if (!speaks) return 0;
  if (o.json) {
    nlohmann::json j{{"event", "summary"}, {"model", model.graph().name}, {"epochs", epochs}, {"steps", steps},
                     {"batch", spec.batch}, {"accumulate", spec.accumulate},
                     {"micro_batches", spec.micro_batches}, {"ranks", trainer.ranks()},
                     {"global_batch", trainer.global_batch()}, {"optimizer_state_bytes", trainer.optimizer_state_bytes()},
                     {"seconds", seconds}, {"train_samples", train.size()}, {"validation_samples", validation.size()}};
    for (const char* key : {"validation_accuracy", "validation_auc"})
      if (!epochs.empty() && epochs.back().contains(key)) j[key] = epochs.back()[key];
    if (!save.empty()) j["checkpoint"] = save;
    if (best && best->best_epoch()) {
      j["best"] = {{"metric", best->metric()}, {"value", best->best_value()}, {"epoch", *best->best_epoch()}};
      if (!spec.keep_best.empty()) j["best"]["checkpoint"] = best_checkpoint_path(save);
    }
    if (stopped_early) j["stopped_early_at_epoch"] = *stopped_early;
    if (!o.resume.empty()) j["resumed_at_step"] = steps_before;
    if (!notes.empty()) j["notes"] = notes;
    if (trainer.scales_loss()) {  // a resumed run's count includes the steps before it
      j["skipped_steps"] = trainer.skipped_steps();
      j["loss_scale"] = trainer.loss_scale();
    }
    if (model.placed() || o.report) j["devices"] = devices_json(model.device_totals(), predicted);  // the whole run, validation too
    fmt::print("{}\n", j.dump());  // one line, the last: JSON lines end with the summary
  } else {
    std::string accuracy;
    if (!epochs.empty() && epochs.back().contains("validation_accuracy"))
      accuracy = fmt::format(", validation accuracy {:.2f}%", 100 * epochs.back()["validation_accuracy"].get<double>());
    if (!epochs.empty() && epochs.back().contains("validation_auc") && !epochs.back()["validation_auc"].is_null())
      accuracy = fmt::format(", validation AUC {:.4f}", epochs.back()["validation_auc"].get<double>());
    const std::string skipped = trainer.scales_loss()
                                    ? fmt::format(" ({} skipped by fp16 loss scaling, scale now {:g})",
                                                  trainer.skipped_steps(), trainer.loss_scale())
                                    : "";
    std::string best_text;
    if (best && best->best_epoch())
      best_text = fmt::format(", best {} {:.6g} at epoch {}{}", best->metric(), best->best_value(), *best->best_epoch(),
                              spec.keep_best.empty() ? "" : " (checkpoint " + best_checkpoint_path(save) + ")");
    if (stopped_early) best_text += fmt::format(", stopped early after epoch {}", *stopped_early);
    fmt::print("done: {} step{}{} in {:.1f}s{}{}{}{}\n", steps, steps == 1 ? "" : "s", skipped, seconds,
               o.resume.empty() ? "" : fmt::format(" (steps {} to {} of the run)", steps_before + 1, trainer.steps_done()),
               accuracy, save.empty() ? "" : ", checkpoint " + save, best_text);
    if (o.report) print_device_report(model.device_totals(), predicted, "whole run: training steps and validation");
  }
  return 0;
}

// A yes/no pair of flags that overrides a train: key only when one of them is given. Not
// CLI11's add_flag("--yes,!--no", optional): that runs its callback for the default too,
// setting the optional to false when neither flag is given, so the model file's value was
// never read. Not excludes() either, whose "Excludes: --no-shuffle" runs into the help's
// flag column: each flag refuses the other itself, and the help says so in words.
struct FlagHelp {
  std::string name, help;
};
void add_override_flags(CLI::App& app, const FlagHelp& yes, const FlagHelp& no, std::optional<bool>& value) {
  auto set = [&value, yes = yes.name, no = no.name](bool to) {
    if (value && *value != to) throw CLI::ValidationError(yes + " and " + no + " contradict each other: give one");
    value = to;
  };
  app.add_flag_callback(yes.name, [set] { set(true); }, yes.help);
  app.add_flag_callback(no.name, [set] { set(false); }, no.help + " (the opposite of " + yes.name + ")");
}

}  // namespace

Command add_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  CLI::App* sub = app.add_subcommand("train", "Train a model on a dataset; flags override the model's train: section");
  sub->add_option("model", o->model, "the model's YAML file (with loss: and targets:)")->required();
  sub->add_option("--data", o->data, "CSV (.csv, .csv.gz), safetensors or NumPy .npz file with the inputs and targets");
  sub->add_option("--epochs", o->epochs, "passes over the training set");
  sub->add_option("--batch", o->batch, "samples per step (under mpirun: per rank, as DDP)");
  sub->add_option("--accumulate", o->accumulate,
                  "micro-batches of --batch samples whose gradients one step sums (gradient accumulation)");
  sub->add_option("--micro-batches", o->micro_batches,
                  "cut each batch into this many micro-batches that flow through the devices one behind the other, "
                  "so that they work at once (train: pipeline: {micro_batches: M}); the same gradients");
  sub->add_option("--lr", o->lr, "learning rate");
  sub->add_option("--optimizer", o->optimizer,
                  "sgd, adam, adamw, adagrad, rowwise_adagrad or sparse_adam (the parameters no train: "
                  "optimizer_groups entry takes)")
      ->check(CLI::IsMember(optimizer_names()));
  sub->add_option("--seed", o->seed, "seed for initial weights, shuffling, the split and dropout");
  sub->add_option("--validation-split", o->validation_split, "fraction of the data held out for validation");
  sub->add_option("--weights", o->weights, "start from these weights (safetensors)");
  sub->add_option("--save", o->save,
                  "write a checkpoint here after every epoch (atomically); with --resume: default the resumed file");
  sub->add_flag("--no-save", o->no_save, "with --resume: write no checkpoint (by default it goes on saving there)");
  sub->add_option("--save-weights", o->save_weights, "write the final weights alone (a state_dict) here");
  add_override_flags(*sub,
                     {"--overlap-next-batch",
                      "placed: start the next batch's uploads and cpu table lookups during this step's backward, "
                      "looking rows the update changed up again: the same bits (default: train: pipeline: "
                      "overlap_next_batch, else on)"},
                     {"--no-overlap-next-batch", "placed: each step starts its batch after the update before it"},
                     o->overlap_next_batch);
  add_override_flags(*sub,
                     {"--update-tables-in-backward",
                      "update each sparse: true table in the backward that completes its row gradient, where the "
                      "step allows: the same bits (default: train: update_tables_in_backward, else on)"},
                     {"--no-update-tables-in-backward", "update every parameter in the optimizer step after backward"},
                     o->update_tables_in_backward);
  add_override_flags(*sub, {"--shuffle", "shuffle the training set each epoch (default: train: shuffle, else true)"},
                     {"--no-shuffle", "train on the data in its order"}, o->shuffle);
  add_override_flags(*sub, {"--drop-last", "drop an epoch's last, smaller batch (default: train: drop_last, else false)"},
                     {"--keep-last", "train on an epoch's last, smaller batch too"}, o->drop_last);
  sub->add_option("--resume", o->resume, "continue the run saved in this checkpoint");
  sub->add_option("--bench-steps", o->bench_steps, "time this many steps on two random batches in turn instead of training")
      ->check(CLI::Range(1, 1000000));
  sub->add_option("--bind", o->binds, "with --bench-steps: value of a symbol other than batch, NAME=VALUE");
  sub->add_flag("--json", o->json,
                "print JSON lines as the run goes (step and epoch records), the last one the run's summary");
  sub->add_flag("--no-progress", o->no_progress,
                "draw no progress bar on a terminal: the lines a log gets instead (a line per epoch, step lines)");
  sub->add_option("--log-every", o->log_every,
                  "a step record (JSON line, CSV row, a text line where stdout is no terminal) every N steps "
                  "(default: one a second at most; text lines one each 10 seconds)")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000000}));
  sub->add_option("--keep-best", o->keep_best,
                  "also keep the checkpoint of the epoch with the best validation value (val_loss, val_accuracy or "
                  "val_auc) beside --save's, as CKPT.best.safetensors");
  sub->add_option("--early-stop", o->early_stop,
                  "stop when the validation value (--keep-best's metric, else val_loss) has not improved for this many "
                  "epochs")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000000}));
  sub->add_option("--log-dir", o->log_dir,
                  "write metrics.csv and a TensorBoard event file of the step and epoch records into this directory");
  add_precision_flag(*sub, o->precision);
  add_device_flags(*sub, o->placement, "train placed over the cpu and N simulated GPUs");
  add_policy_flags(*sub, o->placement);
  sub->add_flag("--report", o->report,
                "train placed and print each device's peak memory, busy time and copies over the whole run");
  add_trace_option(*sub, o->trace);
  add_distributed_flags(*sub, o->distributed);
  return [o] {
    std::shared_ptr<ProcessGroup> group = join_job(o->distributed);
    return run_as_rank(*group, [&] { return train_as_rank(*o, group); });
  };
}

}  // namespace tandem::cli
