// tandem evaluate MODEL.yaml --weights W --data FILE: a labelled set's loss and the model's
// metrics (accuracy for classification losses, ROC AUC for binary ones), without training;
// placed as `run` and `train` place it.
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "runtime/cli/commands.h"
#include "runtime/cli/device_report_output.h"
#include "runtime/cli/placement_options.h"
#include "runtime/cli/precision_option.h"
#include "runtime/cli/slow_step_note.h"
#include "runtime/trainer.h"

namespace tandem::cli {
namespace {

struct EvaluateOptions {
  std::string precision;
  std::string model, weights, data;
  std::optional<int64_t> batch;
  bool json = false;
  bool report = false;
  PlacementFlags placement;
};

/// The data to score: --data (relative to the working directory), else the model's train:
/// data; a CSV's header and columns: as the model file gives them.
DataSpec data_spec(const Graph& graph, const EvaluateOptions& o) {
  DataSpec d = graph.training && graph.training->data ? *graph.training->data : DataSpec{};
  if (!o.data.empty()) {
    d.path = o.data;
    d.named_at = "";
    d.format = "";
  }
  if (d.path.empty()) throw UserError("no data to evaluate: give --data FILE (CSV, safetensors or .npz with the inputs "
                                      "and targets) or a data: entry in the model's train: section");
  return d;
}

int evaluate(const EvaluateOptions& o) {
  Model model = Model::load(o.model, Model::Start::weights_follow);
  if (auto precision = parse_precision_option(o.precision)) model.set_precision(*precision);
  if (!model.graph().loss)
    throw UserError(o.model + ": the model has no loss: section, so there is nothing to evaluate; add one (docs/training.md), "
                    "or write its outputs with tandem predict");
  apply_placement_flags(model, o.placement, o.report);
  {
    SlowStepNote note("loading weights " + file_with_size(o.weights));
    model.load_weights(o.weights);
  }
  TrainingSpec spec = model.graph().training.value_or(TrainingSpec{});
  if (o.batch) {
    if (*o.batch < 1) throw UserError("--batch must be at least 1");
    spec.batch = *o.batch;
  }
  // scoring needs no optimizer state: plain SGD keeps none, whatever the model trains with
  spec.optimizer = optimizer_defaults("sgd");
  spec.optimizer_groups.clear();
  spec.accumulate = 1;
  // a device the machine lacks is refused before the data loads; the report sets this
  // plan's predicted peaks beside the measured ones
  const Plan predicted = model.plan_for({{"batch", spec.batch}}, /*training=*/false);
  const DataSpec data_spec_ = data_spec(model.graph(), o);
  Dataset data = [&] {
    SlowStepNote note("reading the data " + file_with_size(data_spec_.path));
    return load_dataset(data_spec_, data_columns(model.graph()));
  }();
  Trainer trainer(model, spec);
  const EvalResult r = trainer.evaluate(data);
  if (o.json) {
    nlohmann::json j{{"event", "evaluation"}, {"model", model.graph().name}, {"data", data_spec_.path},
                     {"samples", r.samples}, {"batch", spec.batch}, {"loss", r.loss}};
    if (r.accuracy) j["accuracy"] = *r.accuracy;
    if (r.auc) {
      j["auc"] = r.auc->value ? nlohmann::json(*r.auc->value) : nlohmann::json(nullptr);
      if (!r.auc->value) j["auc_undefined"] = r.auc->undefined;
    }
    if (model.placed()) j["devices"] = devices_json(model.device_totals(), predicted);
    fmt::print("{}\n", j.dump());
    return 0;
  }
  std::string metrics = fmt::format("loss {:.6g}", r.loss);
  if (r.accuracy) metrics += fmt::format("  accuracy {:.2f}%", 100 * *r.accuracy);
  if (r.auc) metrics += r.auc->value ? fmt::format("  auc {:.4f}", *r.auc->value) : "  auc undefined (" + r.auc->undefined + ")";
  fmt::print("evaluated '{}' on {} samples of {}: {}\n", model.graph().name, r.samples, data_spec_.path, metrics);
  if (o.report) print_device_report(model.device_totals(), predicted, "the whole evaluation");
  return 0;
}

}  // namespace

Command add_evaluate_command(CLI::App& app) {
  auto o = std::make_shared<EvaluateOptions>();
  CLI::App* sub = app.add_subcommand("evaluate", "The loss and metrics of trained weights on a labelled data set");
  sub->add_option("model", o->model, "the model's YAML file (with loss: and targets:)")->required();
  sub->add_option("--weights", o->weights, "the weights to evaluate: safetensors, or a checkpoint of tandem train")
      ->required();
  sub->add_option("--data", o->data,
                  "CSV (.csv, .csv.gz), safetensors or .npz file with the inputs and targets (default: the model's "
                  "train: data)");
  sub->add_option("--batch", o->batch, "samples per forward (default: the model's train: batch, else 32)");
  sub->add_flag("--json", o->json, "print the result as one JSON line");
  add_precision_flag(*sub, o->precision);
  add_device_flags(*sub, o->placement, "evaluate placed over the cpu and N simulated GPUs");
  add_policy_flags(*sub, o->placement);
  sub->add_flag("--report", o->report, "evaluate placed and print each device's memory, busy time and copies");
  return [o] { return evaluate(*o); };
}

}  // namespace tandem::cli
