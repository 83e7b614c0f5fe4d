// tandem predict MODEL.yaml --weights W --inputs FILE --outputs OUT: the model's outputs for
// a file of inputs (a labelled file too: its targets are left out), written as safetensors,
// .npy or CSV by OUT's extension; placed as `run` places it.
#include <fmt/core.h>

#include <limits>

#include <nlohmann/json.hpp>

#include "runtime/cli/commands.h"
#include "runtime/cli/device_report_output.h"
#include "runtime/cli/output_paths.h"
#include "runtime/cli/placement_options.h"
#include "runtime/cli/precision_option.h"
#include "runtime/cli/prediction_file.h"
#include "runtime/cli/slow_step_note.h"
#include "runtime/input_file.h"
#include "runtime/model.h"

namespace tandem::cli {
namespace {

struct PredictOptions {
  std::string precision;
  std::string model, weights, inputs, outputs;
  bool json = false;
  bool report = false;
  int64_t batch = 0;  // 0: the file as one batch
  PlacementFlags placement;
};

int predict(const PredictOptions& o) {
  Model model = Model::load(o.model, Model::Start::weights_follow);
  std::vector<std::string> order;
  for (const GraphOutput& out : model.graph().outputs) order.push_back(out.name);
  // before any work: an output that cannot be written is known at once
  check_prediction_path(o.outputs, order);
  check_output_paths({{"--outputs", o.outputs}},
                     {{"the model file", o.model}, {"--weights", o.weights}, {"--inputs", o.inputs}});
  if (auto precision = parse_precision_option(o.precision)) model.set_precision(*precision);
  apply_placement_flags(model, o.placement, o.report);
  {
    SlowStepNote note("loading weights " + file_with_size(o.weights));
    model.load_weights(o.weights);
  }
  TensorMap inputs = read_input_file(o.inputs, model.graph());
  TensorMap outputs = o.batch > 0 ? model.forward_batches(inputs, o.batch) : model.forward(inputs);
  write_predictions(o.outputs, outputs, order);
  const int64_t samples = inputs.empty() || inputs.begin()->second.dim() == 0 ? 0 : inputs.begin()->second.size(0);
  if (o.json) {
    nlohmann::json j{{"event", "prediction"}, {"model", model.graph().name}, {"inputs", o.inputs},
                     {"outputs", o.outputs}, {"bindings", model.bind(inputs)}};
    for (const std::string& name : order) j["shapes"][name] = outputs.at(name).shape();
    if (model.placed()) j["devices"] = devices_json(model.device_report(), model.last_plan());
    fmt::print("{}\n", j.dump());
    return 0;
  }
  fmt::print("predicted '{}' for {} ({} samples): {} written to {}\n", model.graph().name, o.inputs, samples,
             order.size() == 1 ? "output " + order.front() : fmt::format("{} outputs", order.size()), o.outputs);
  if (o.report) print_device_report(model.device_report(), model.last_plan(), "the forward");
  return 0;
}

}  // namespace

Command add_predict_command(CLI::App& app) {
  auto o = std::make_shared<PredictOptions>();
  CLI::App* sub = app.add_subcommand("predict", "Write a model's outputs for a file of inputs (CSV, .npy, safetensors)");
  sub->add_option("model", o->model, "the model's YAML file")->required();
  sub->add_option("--weights", o->weights, "trained weights: safetensors, or a checkpoint of tandem train")->required();
  sub->add_option("--inputs", o->inputs,
                  "the inputs: safetensors or .npz by name, .npy for a one-input model, or CSV (a labelled file's "
                  "targets are left out when its header names the columns)")
      ->required();
  sub->add_option("--outputs", o->outputs,
                  "where to write the outputs: .safetensors (by name), .npy (one output) or .csv (a line per sample)")
      ->required();
  sub->add_option("--batch", o->batch,
                  "predict this many samples at a time (default: the whole file as one batch); placed, the next "
                  "batch's cpu layers and uploads overlap this batch's GPU work")
      ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  sub->add_flag("--json", o->json, "print what was written as one JSON line");
  add_precision_flag(*sub, o->precision);
  add_device_flags(*sub, o->placement, "predict placed over the cpu and N simulated GPUs");
  add_policy_flags(*sub, o->placement);
  sub->add_flag("--report", o->report, "predict placed and print each device's memory, busy time and copies");
  return [o] { return predict(*o); };
}

}  // namespace tandem::cli
