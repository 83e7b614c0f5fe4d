// tandem run MODEL.yaml: inference on given or random inputs.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <span>
#include <nlohmann/json.hpp>

#include "core/memory_size.h"
#include "runtime/cli/bind_option.h"
#include "runtime/cli/commands.h"
#include "runtime/cli/device_report_output.h"
#include "runtime/cli/output_paths.h"
#include "runtime/cli/placement_options.h"
#include "runtime/cli/precision_option.h"
#include "runtime/cli/slow_step_note.h"
#include "runtime/cli/trace_option.h"
#include "runtime/devices/device_registry.h"
#include "runtime/input_file.h"
#include "runtime/io/safetensors.h"
#include "runtime/model.h"

namespace tandem::cli {
namespace {

struct RunOptions {
  std::string precision;  // --precision, checked by parse_precision_option
  std::string model;
  std::optional<int64_t> batch;
  std::vector<std::string> binds;
  std::string weights, inputs, outputs, save_weights;
  uint64_t seed = 0;
  int repeat = 0;
  bool json = false;
  PlacementFlags placement;
  bool report = false;
  bool no_fusion = false;  // --no-fusion
  std::string trace;  // --trace
};

Bindings parse_bindings(const RunOptions& o, const Graph& graph) {
  Bindings b = parse_bind_options(o.binds, graph);
  if (o.batch) {
    if (*o.batch < 1) throw UserError("--batch must be at least 1");
    b["batch"] = *o.batch;
  }
  return b;
}

/// Mean, spread and range of a float output over its values that are not NaN, with the
/// NaNs and infinities counted: an output of NaNs alone has no range (it printed as
/// "min inf max -inf").
struct OutputStats {
  double mean = NAN, std = NAN, min = NAN, max = NAN;
  int64_t nans = 0, infinities = 0, count = 0;
};

OutputStats output_stats(std::span<const float> v) {
  OutputStats s;
  double sum = 0, sq = 0;
  float lo = INFINITY, hi = -INFINITY;
  for (float x : v) {
    if (std::isnan(x)) {
      ++s.nans;
      continue;
    }
    if (std::isinf(x)) ++s.infinities;
    sum += x, sq += double(x) * x, lo = std::min(lo, x), hi = std::max(hi, x);
  }
  s.count = static_cast<int64_t>(v.size());
  const int64_t n = s.count - s.nans;
  if (s.count == 0) s.mean = s.std = s.min = s.max = 0;
  if (n == 0) return s;
  s.mean = sum / n;
  s.std = std::sqrt(std::max(0.0, sq / n - s.mean * s.mean));
  s.min = lo;
  s.max = hi;
  return s;
}

/// "" or "  (3 of 20 values are NaN, 1 infinite)".
std::string non_finite_note(const OutputStats& s) {
  if (s.nans == 0 && s.infinities == 0) return "";
  std::string note = "  (";
  if (s.nans > 0) note += fmt::format("{} of {} values are NaN", s.nans, s.count);
  if (s.infinities > 0) note += fmt::format("{}{} infinite", s.nans > 0 ? ", " : "", s.infinities);
  if (s.nans == 0) note += fmt::format(" of {}", s.count);
  return note + ")";
}

nlohmann::json summarize(const Tensor& t) {
  nlohmann::json j{{"shape", t.shape()}, {"dtype", dtype_name(t.dtype())}};
  if (t.dtype() != DType::float32) {
    if (t.numel() <= 4096) j["values"] = t.to_vector<int64_t>();
    return j;
  }
  auto v = t.span<float>();
  OutputStats s = output_stats(v);
  // JSON has no NaN: nlohmann writes null, which is what a range of no values is
  j["mean"] = s.mean;
  j["std"] = s.std;
  j["min"] = s.min;
  j["max"] = s.max;
  if (s.nans > 0) j["nan_count"] = s.nans;
  if (s.infinities > 0) j["inf_count"] = s.infinities;
  if (v.size() <= 4096) j["values"] = std::vector<float>(v.begin(), v.end());
  else j["values_omitted"] = "more than 4096 elements; use --outputs FILE.safetensors";
  return j;
}

int run_inference(const RunOptions& o) {
  // before the weights are made: an output that cannot be written is known at once
  check_output_paths({{"--outputs", o.outputs}, {"--save-weights", o.save_weights}, {"--trace", o.trace}},
                     {{"the model file", o.model}, {"--weights", o.weights}, {"--inputs", o.inputs}});
  start_trace(o.trace);
  Model model = Model::load(o.model, o.weights.empty() ? Model::Start::seeded : Model::Start::weights_follow);
  if (auto precision = parse_precision_option(o.precision)) model.set_precision(*precision);
  model.set_inference_regions(!o.no_fusion);
  std::vector<std::string> notes;  // the plan's notes join these after the forward
  if (!o.weights.empty()) {
    SlowStepNote note("loading weights " + file_with_size(o.weights));
    notes = model.load_weights(o.weights);
  } else {
    SlowStepNote note("initialising the weights of '" + model.graph().name + "'");
    model.init_parameters(o.seed);
  }
  apply_placement_flags(model, o.placement, o.report);
  if (!o.save_weights.empty()) model.save_weights(o.save_weights);

  TensorMap inputs;
  Bindings requested = parse_bindings(o, model.graph());
  if (!o.inputs.empty()) {
    inputs = read_input_file(o.inputs, model.graph());
    Bindings actual = model.bind(inputs);
    for (const auto& [name, value] : requested)
      if (actual.count(name) && actual[name] != value)
        throw UserError("--" + std::string(name == "batch" ? "batch" : "bind " + name) + " says " + std::to_string(value) +
                        " but the inputs in " + o.inputs + " have " + name + " = " + std::to_string(actual[name]));
  } else {
    for (const std::string& s : model.graph().symbols())
      if (s == "batch" && !requested.count(s)) requested[s] = 1;
    inputs = model.random_inputs(requested, o.seed);
  }
  Bindings bindings = model.bind(inputs);

  TensorMap outputs = model.forward(inputs);
  const std::vector<std::string>& plan_notes = model.last_plan().notes;
  notes.insert(notes.end(), plan_notes.begin(), plan_notes.end());
  std::vector<double> times_ms;
  if (o.repeat > 0) {
    for (int i = 0; i < std::min(o.repeat, 3); ++i) model.forward(inputs);  // warm caches
    for (int i = 0; i < o.repeat; ++i) {
      auto start = std::chrono::steady_clock::now();
      outputs = model.forward(inputs);
      times_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
  }
  if (!o.outputs.empty()) write_safetensors(o.outputs, outputs, {{"model", model.graph().name}});

  std::vector<double> sorted = times_ms;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  if (o.json) {
    nlohmann::json j;
    j["model"] = model.graph().name;
    j["bindings"] = bindings;
    for (const auto& [name, t] : outputs) j["outputs"][name] = summarize(t);
    if (!times_ms.empty())
      j["timing"] = {{"repeat", o.repeat}, {"median_ms", median}, {"min_ms", sorted.front()}, {"max_ms", sorted.back()}};
    if (model.placed() || o.report) {  // --report: the devices, the cpu alone too
      j["policy"] = model.last_plan().policy;
      j["devices"] = devices_json(model.device_report(), model.last_plan());
    }
    j["notes"] = notes;
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  std::vector<std::string> bound;
  for (const auto& [k, v] : bindings) bound.push_back(k + "=" + std::to_string(v));
  fmt::print("model '{}'  {}  ({})\n", model.graph().name, fmt::join(bound, " "),
             o.inputs.empty() ? "random inputs, seed " + std::to_string(o.seed) : "inputs from " + o.inputs);
  for (const auto& [name, t] : outputs) {
    fmt::print("output {} {} {}\n", name, dtype_name(t.dtype()), shape_str(t.shape()));
    if (t.dtype() == DType::float32) {
      auto v = t.span<float>();
      OutputStats s = output_stats(v);
      std::vector<float> head(v.begin(), v.begin() + std::min<size_t>(v.size(), 8));
      fmt::print("  mean {:.6g}  std {:.6g}  min {:.6g}  max {:.6g}{}\n  first values: {:.5g}{}\n", s.mean, s.std, s.min,
                 s.max, non_finite_note(s), fmt::join(head, " "), v.size() > head.size() ? " ..." : "");
    }
  }
  if (!times_ms.empty())
    fmt::print("forward: median {:.4f} ms, min {:.4f} ms over {} runs\n", median, sorted.front(), o.repeat);
  if (!o.outputs.empty()) fmt::print("outputs written to {}\n", o.outputs);
  if (o.report) print_device_report(model.device_report(), model.last_plan(), "last forward");
  for (const std::string& note : notes) fmt::print("note: {}\n", note);
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* sub = app.add_subcommand("run", "Run inference on given inputs, or on random ones");
  sub->add_option("model", o->model, "the model's YAML file")->required();
  sub->add_option("--batch", o->batch, "value of the symbol 'batch' for random inputs (default 1)");
  sub->add_option("--bind", o->binds, "value of another symbol, NAME=VALUE (repeatable)");
  sub->add_option("--weights", o->weights, "safetensors file with every parameter (state_dict names)");
  sub->add_option("--inputs", o->inputs, "the graph inputs: safetensors or NumPy .npz by name, .npy for a one-input model, or CSV (one sample a line)");
  sub->add_option("--outputs", o->outputs, "write the outputs to this safetensors file");
  sub->add_option("--save-weights", o->save_weights, "write the (initialised or loaded) weights to this file");
  sub->add_option("--seed", o->seed, "seed for weight initialisation and random inputs (default 0)");
  sub->add_option("--repeat", o->repeat, "time this many forward passes after warm-up")->check(CLI::Range(0, 1000000));
  sub->add_flag("--json", o->json, "print a machine-readable result");
  add_precision_flag(*sub, o->precision);
  add_device_flags(*sub, o->placement, "run placed over the cpu and N simulated GPUs");
  add_policy_flags(*sub, o->placement);
  sub->add_flag("--report", o->report, "run placed and print each device's memory, busy time and copies");
  sub->add_flag("--no-fusion", o->no_fusion,
                "run every layer on its own, not a convolution with the batch norm, activations and add after it "
                "as one kernel (to compare, or to measure layers one by one)");
  add_trace_option(*sub, o->trace);
  return [o] { return run_inference(*o); };
}

}  // namespace tandem::cli
