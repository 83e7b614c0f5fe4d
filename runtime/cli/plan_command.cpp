// tandem plan MODEL.yaml: where each layer would run and why, the copies between devices,
// and the predicted memory per device. Runs nothing: placement is a pure function.
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "graph/load_graph.h"
#include "core/memory_size.h"
#include "placement/place.h"
#include "placement/plan_dot.h"
#include "runtime/cli/bind_option.h"
#include "runtime/cli/commands.h"
#include "runtime/cli/graphviz_render.h"
#include "runtime/cli/output_paths.h"
#include "runtime/cli/placement_options.h"
#include "runtime/cli/precision_option.h"
#include "runtime/devices/backend_capabilities.h"
#include "runtime/devices/device_registry.h"

namespace tandem::cli {
namespace {

struct PlanOptions {
  std::string precision;  // --precision, checked by parse_precision_option
  std::string model;
  PlacementFlags placement;
  std::optional<int64_t> batch;  // unset: the batch the run would use (see planned_batch)
  std::vector<std::string> binds;
  bool train = false;
  bool json = false;
  std::string dot;
  std::string svg;
  std::string png;
};

/// The batch to plan at: --batch, else the model's train: batch (the batch a model that
/// trains is run at, for inference too: a data-parallel block's chunks are those it will
/// see), else 1 (run's default).
int64_t planned_batch(const PlanOptions& o, const Graph& g) {
  if (o.batch) return *o.batch;
  return g.training ? g.training->batch : 1;
}

/// Where planned_batch's batch comes from, for the plan's first line.
std::string batch_source(const PlanOptions& o, const Graph& g) {
  if (o.batch) return "--batch";
  return g.training ? "the model's train: batch" : "run's default; give --batch N";
}

PlacementPolicy make_policy(const PlanOptions& o, const Graph& g) {
  PlacementPolicy p = placement_policy(o.placement, g);
  for (const auto& [name, value] : parse_bind_options(o.binds, g)) p.bindings[name] = value;
  p.training = o.train;
  p.batch = planned_batch(o, g);
  return p;
}

nlohmann::json to_json(const Graph& given, const Plan& plan) {
  const Graph& g = executed_graph(plan, given);  // with data_parallel replicas
  nlohmann::json j;
  j["model"] = g.name;
  j["policy"] = plan.policy;
  j["training"] = plan.training;
  j["batch"] = plan.batch;
  j["layers"] = nlohmann::json::array();
  for (const OpStep& s : plan.steps)
    j["layers"].push_back({{"path", g.nodes[s.node].path},
                           {"op", g.nodes[s.node].op},
                           {"device", s.device.str()},
                           {"precision", precision_name(s.precision.precision)},
                           {"precision_reason", s.precision.why},
                           {"reason", s.reason},
                           {"parameter_bytes", s.parameter_bytes},
                           {"activation_bytes", s.activation_bytes}});
  j["segments"] = nlohmann::json::array();
  for (const Segment& s : plan.segments)
    j["segments"].push_back({{"device", s.device.str()},
                             {"first_layer", g.nodes[plan.steps[s.first_step].node].path},
                             {"last_layer", g.nodes[plan.steps[s.end_step - 1].node].path},
                             {"layers", s.end_step - s.first_step}});
  j["copies"] = nlohmann::json::array();
  for (const CopyStep& c : plan.copies)
    j["copies"].push_back({{"value", g.values[c.value].name},
                           {"from", c.from.str()},
                           {"to", c.to.str()},
                           {"bytes", c.bytes},
                           {"direction", c.forward ? "forward" : "backward"},
                           {"before_step", c.before_step},
                           {"reason", c.reason}});
  j["devices"] = nlohmann::json::array();
  for (const DeviceEstimate& e : plan.estimates)
    j["devices"].push_back({{"device", e.device.str()},
                            {"parameter_bytes", e.parameter_bytes},
                            {"activation_bytes", e.activation_bytes},
                            {"gradient_bytes", e.gradient_bytes},
                            {"optimizer_bytes", e.optimizer_bytes},
                            {"peak_bytes", e.peak_bytes},
                            {"capacity_bytes", e.capacity_bytes},
                            {"budget_bytes", e.budget_bytes},
                            {"fits", e.budget_bytes == 0 || e.peak_bytes <= e.budget_bytes}});
  j["notes"] = plan.notes;
  return j;
}

void print_table(const Graph& given, const Plan& plan, const std::string& batch_from) {
  const Graph& g = executed_graph(plan, given);  // with data_parallel replicas
  fmt::print("model '{}': policy {}, {}, batch {} ({})\n\n", g.name, plan.policy,
             plan.training ? "training" : "inference", plan.batch, batch_from);
  size_t op_width = 14;  // as wide as the longest op (multi_head_attention)
  for (const OpStep& s : plan.steps) op_width = std::max(op_width, g.nodes[s.node].op.size());
  fmt::print("{:<28} {:<{}} {:<8} {:<9} {:>12} {:>12}  {}\n", "layer", "op", op_width, "device", "precision", "parameters",
             "activation", "reason");
  for (const OpStep& s : plan.steps)
    fmt::print("{:<28} {:<{}} {:<8} {:<9} {:>12} {:>12}  {}\n", g.nodes[s.node].path, g.nodes[s.node].op, op_width, s.device.str(),
               precision_name(s.precision.precision), format_bytes(s.parameter_bytes), format_bytes(s.activation_bytes),
               s.precision.why.empty() ? s.reason : s.reason + "; fp32: " + s.precision.why);
  fmt::print("\ncopies (bytes per batch):\n");
  if (plan.copies.empty()) fmt::print("  none: every layer, input and output is on one device\n");
  for (const CopyStep& c : plan.copies)
    fmt::print("  {:<8} {:<24} {:>7} -> {:<7} {:>12}  {}\n", c.forward ? "forward" : "backward", g.values[c.value].name,
               c.from.str(), c.to.str(), format_bytes(c.bytes), c.reason);
  fmt::print("\npredicted peak memory per device:\n");
  fmt::print("  {:<8} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}\n", "device", "parameters", "activations",
             "gradients", "optimizer", "peak", "capacity", "budget");
  for (const DeviceEstimate& e : plan.estimates)
    fmt::print("  {:<8} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}{}\n", e.device.str(),
               format_bytes(e.parameter_bytes), format_bytes(e.activation_bytes), format_bytes(e.gradient_bytes),
               format_bytes(e.optimizer_bytes), format_bytes(e.peak_bytes),
               e.capacity_bytes ? format_bytes(e.capacity_bytes) : std::string("?"),
               e.budget_bytes == e.capacity_bytes ? std::string("-") : format_bytes(e.budget_bytes),
               e.budget_bytes != 0 && e.peak_bytes > e.budget_bytes ? "  DOES NOT FIT" : "");
  for (const std::string& note : plan.notes) fmt::print("note: {}\n", note);
}

int run_plan(const PlanOptions& o) {
  check_output_paths({{"--dot", o.dot}, {"--svg", o.svg}, {"--png", o.png}}, {{"the model file", o.model}});
  if (!o.svg.empty()) require_dot_program("--svg");
  if (!o.png.empty()) require_dot_program("--png");
  Graph g = load_graph(o.model);
  if (auto precision = parse_precision_option(o.precision)) g.precision = *precision;
  DeviceRegistry registry(device_options(o.placement));
  PlacementPolicy policy = make_policy(o, g);
  ask_backends(policy, registry);
  // --place '*=cpu' moves the whole model, data_parallel blocks included, as run and train do
  Plan plan = everything_on_cpu(o.placement) ? place_on_cpu(g, registry.inventory(), policy)
                                             : place(g, registry.inventory(), policy);
  if (!o.dot.empty()) {
    std::ofstream out(o.dot);
    out << plan_to_dot(g, plan);
    if (!out) throw UserError("cannot write --dot file '" + o.dot + "'");
  }
  if (!o.svg.empty()) render_dot(plan_to_dot(g, plan), "svg", o.svg, "--svg");
  if (!o.png.empty()) render_dot(plan_to_dot(g, plan), "png", o.png, "--png");
  if (o.json) {
    nlohmann::json j = to_json(g, plan);
    j["batch_from"] = batch_source(o, g);
    fmt::print("{}\n", j.dump(2));
  } else {
    print_table(g, plan, batch_source(o, g));
  }
  // The plan is shown either way, so that the user sees what does not fit; then it is
  // refused like any other impossible placement.
  const std::vector<std::string> over = over_budget(plan);
  if (over.empty()) return 0;
  std::fflush(stdout);
  for (const std::string& line : over) fmt::print(stderr, "error: {}\n", line);
  fmt::print(stderr, "error: the plan does not fit (exit code 2); use a smaller --batch, --placement balanced, more or "
                     "larger devices (--sim-gpus, --sim-gpu-memory), or move layers with --place\n");
  return 2;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* sub = app.add_subcommand("plan", "Show where each layer would run and why, the copies, and memory per device");
  sub->add_option("model", o->model, "the model's YAML file")->required();
  add_device_flags(*sub, o->placement, "plan for the cpu and N simulated GPUs instead of this machine's");
  sub->add_option("--batch", o->batch,
                  "value of the symbol 'batch' for byte estimates (default: the model's train: batch, else 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  sub->add_option("--bind", o->binds, "value of another symbol, NAME=VALUE (repeatable)");
  sub->add_flag("--train", o->train, "plan for training: gradients, optimizer state, backward copies");
  add_policy_flags(*sub, o->placement);
  add_precision_flag(*sub, o->precision);
  sub->add_flag("--json", o->json, "print the plan as JSON");
  sub->add_option("--dot", o->dot, "write the plan as Graphviz to this file");
  sub->add_option("--svg", o->svg, "render the plan as SVG to this file (needs Graphviz's dot)");
  sub->add_option("--png", o->png, "render the plan as PNG to this file (needs Graphviz's dot)");
  return [o] { return run_plan(*o); };
}

}  // namespace tandem::cli
