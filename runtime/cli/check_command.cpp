// tandem check MODEL.yaml: validate a model and show its layers, shapes and parameters.
#include <fmt/core.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <variant>

#include "core/memory_size.h"
#include "graph/batch_dim.h"
#include "graph/load_graph.h"
#include "placement/plan.h"
#include "runtime/cli/commands.h"

namespace tandem::cli {
namespace {

struct CheckOptions {
  std::string model;
  bool json = false;
};

std::string declared_device(const Graph& g, const Node& n) {
  std::string s = n.device ? n.device->str() : "-";
  for (int b = n.block; b >= 0; b = g.blocks[b].parent)
    if (g.blocks[b].data_parallel) {
      const DataParallelSpec& dp = *g.blocks[b].data_parallel;
      if (dp.all_devices) return "dp[all]";
      s = "dp[";
      for (size_t i = 0; i < dp.devices.size(); ++i) s += (i ? "," : "") + dp.devices[i].str();
      return s + "]";
    }
  return s;
}

/// A shape as JSON: a list of sizes, a symbol or expression as its text (["batch", 64]).
nlohmann::json shape_json(const SymShape& shape) {
  nlohmann::json out = nlohmann::json::array();
  for (const Dim& d : shape) out.push_back(d.is_constant() ? nlohmann::json(d.constant()) : nlohmann::json(d.str()));
  return out;
}

/// Attributes as a JSON object with their YAML types (null, bool, number, text, lists).
nlohmann::json attributes_json(const Attributes& attrs) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : attrs.values()) {
    nlohmann::json& slot = out[name];  // named outside the lambda: clang 14 cannot capture a structured binding
    std::visit(
        [&slot](const auto& v) {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::monostate>) slot = nullptr;
          else slot = v;
        },
        value);
  }
  return out;
}

/// "12,345": a count a reader takes in at a glance.
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

/// "1.2 M", "34.5 K", "950": parameters in the units papers count them in.
std::string human_count(int64_t n) {
  if (n >= 1'000'000'000) return fmt::format("{:.1f} B", n / 1e9);
  if (n >= 1'000'000) return fmt::format("{:.1f} M", n / 1e6);
  if (n >= 1'000) return fmt::format("{:.1f} K", n / 1e3);
  return std::to_string(n);
}

std::string loss_text(const Graph& g) {
  const LossSpec& l = *g.loss;
  std::string text = fmt::format("{}({}, {}), reduction {}", l.op, g.values[l.input].name, g.values[l.target].name, l.reduction);
  if (l.op == "cross_entropy" || l.op == "nll_loss") text += fmt::format(", ignore_index {}", l.ignore_index);
  if (l.label_smoothing != 0) text += fmt::format(", label_smoothing {}", l.label_smoothing);
  if (l.parallel) text += ", parallel";
  return text;
}

int run_check(const CheckOptions& o) {
  Graph g = load_graph(o.model);
  if (o.json) {
    nlohmann::json j;
    j["model"] = g.name;
    j["file"] = g.file;
    j["parameters"] = g.parameter_count();
    j["parameter_bytes"] = g.parameter_count() * 4;
    for (const GraphInput& in : g.inputs)
      j["inputs"].push_back({{"name", in.name},
                             {"shape", shape_json(g.values[in.value].type.shape)},
                             {"dtype", dtype_name(g.values[in.value].type.dtype)}});
    for (const GraphInput& t : g.targets)
      j["targets"].push_back({{"name", t.name},
                              {"shape", shape_json(g.values[t.value].type.shape)},
                              {"dtype", dtype_name(g.values[t.value].type.dtype)}});
    if (g.loss) {
      const LossSpec& l = *g.loss;
      j["loss"] = {{"op", l.op}, {"input", g.values[l.input].name}, {"target", g.values[l.target].name},
                   {"reduction", l.reduction}, {"parallel", l.parallel}};
      if (l.op == "cross_entropy" || l.op == "nll_loss") j["loss"]["ignore_index"] = l.ignore_index;
      if (l.op == "cross_entropy") j["loss"]["label_smoothing"] = l.label_smoothing;
    }
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      int64_t params = 0;
      for (const ParamSpec& p : n.params) params += p.trainable ? shape_numel(p.shape) : 0;  // buffers are not parameters
      j["layers"].push_back({{"path", n.path},
                             {"op", n.op},
                             {"attributes", attributes_json(n.attrs)},
                             {"output_shape", shape_json(g.values[n.output].type.shape)},
                             {"dtype", dtype_name(g.values[n.output].type.dtype)},
                             {"parameters", params},
                             {"declared_device", declared_device(g, n)}});
    }
    for (const GraphOutput& out : g.outputs)
      j["outputs"].push_back({{"name", out.name}, {"shape", shape_json(g.values[out.value].type.shape)}});
    j["notes"] = scatter_dim_notes(g);
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("model '{}' ({}): OK\n\n", g.name, g.file);
  for (const GraphInput& in : g.inputs)
    fmt::print("input  {:<28} {:<8} {}\n", in.name, dtype_name(g.values[in.value].type.dtype),
               sym_shape_str(g.values[in.value].type.shape));
  for (const GraphInput& t : g.targets)
    fmt::print("target {:<28} {:<8} {}\n", t.name, dtype_name(g.values[t.value].type.dtype),
               sym_shape_str(g.values[t.value].type.shape));
  size_t op_width = 14;  // as wide as the longest op (multi_head_attention)
  for (const Node& n : g.nodes) op_width = std::max(op_width, n.op.size());
  fmt::print("\n{:<32} {:<{}} {:<24} {:>12}  {}\n", "layer", "op", op_width, "output shape", "parameters", "device");
  for (const Node& n : g.nodes) {
    int64_t params = 0;
    for (const ParamSpec& p : n.params) params += p.trainable ? shape_numel(p.shape) : 0;
    fmt::print("{:<32} {:<{}} {:<24} {:>12}  {}\n", n.path, n.op, op_width, sym_shape_str(g.values[n.output].type.shape),
               grouped(params), declared_device(g, n));
  }
  fmt::print("\n");
  for (const GraphOutput& out : g.outputs)
    fmt::print("output {:<28} {}\n", out.name, sym_shape_str(g.values[out.value].type.shape));
  if (g.loss) fmt::print("loss   {}\n", loss_text(g));
  const int64_t count = g.parameter_count();
  std::string size;  // "(26.2 K; 102.5 KiB as float32)", "(950 B as float32)", nothing for none
  if (count >= 1000) size = " (" + human_count(count) + "; ";
  else if (count > 0) size = " (";
  if (count > 0) size += format_bytes(static_cast<size_t>(count) * 4) + " as float32)";
  fmt::print("\n{} layers, {} parameters{}\n", g.nodes.size(), grouped(count), size);
  for (const std::string& note : scatter_dim_notes(g)) fmt::print("note: {}\n", note);
  return 0;
}

}  // namespace

Command add_check_command(CLI::App& app) {
  auto opts = std::make_shared<CheckOptions>();
  CLI::App* sub = app.add_subcommand("check", "Validate a model file; print its layers, output shapes and parameter counts");
  sub->add_option("model", opts->model, "the model's YAML file")->required();
  sub->add_flag("--json", opts->json, "print the result as JSON");
  return [opts] { return run_check(*opts); };
}

}  // namespace tandem::cli
