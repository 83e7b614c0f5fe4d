// tandem check MODEL.yaml: validate a model and show its layers, shapes and parameters.
#include <fmt/core.h>

#include <nlohmann/json.hpp>

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
      s = "dp[";
      for (size_t i = 0; i < dp.devices.size(); ++i) s += (i ? "," : "") + dp.devices[i].str();
      return s + "]";
    }
  return s;
}

int run_check(const CheckOptions& o) {
  Graph g = load_graph(o.model);
  if (o.json) {
    nlohmann::json j;
    j["model"] = g.name;
    j["file"] = g.file;
    j["parameters"] = g.parameter_count();
    for (const GraphInput& in : g.inputs)
      j["inputs"].push_back({{"name", in.name},
                             {"shape", sym_shape_str(g.values[in.value].type.shape)},
                             {"dtype", dtype_name(g.values[in.value].type.dtype)}});
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      int64_t params = 0;
      for (const ParamSpec& p : n.params) params += p.trainable ? shape_numel(p.shape) : 0;  // buffers are not parameters
      j["layers"].push_back({{"path", n.path},
                             {"op", n.op},
                             {"attributes", n.attrs.str()},
                             {"output_shape", sym_shape_str(g.values[n.output].type.shape)},
                             {"dtype", dtype_name(g.values[n.output].type.dtype)},
                             {"parameters", params},
                             {"declared_device", declared_device(g, n)}});
    }
    for (const GraphOutput& out : g.outputs)
      j["outputs"].push_back({{"name", out.name}, {"shape", sym_shape_str(g.values[out.value].type.shape)}});
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("model '{}' ({}): OK\n\n", g.name, g.file);
  for (const GraphInput& in : g.inputs)
    fmt::print("input  {:<28} {:<8} {}\n", in.name, dtype_name(g.values[in.value].type.dtype),
               sym_shape_str(g.values[in.value].type.shape));
  fmt::print("\n{:<32} {:<14} {:<24} {:>12}  {}\n", "layer", "op", "output shape", "parameters", "device");
  for (const Node& n : g.nodes) {
    int64_t params = 0;
    for (const ParamSpec& p : n.params) params += p.trainable ? shape_numel(p.shape) : 0;
    fmt::print("{:<32} {:<14} {:<24} {:>12}  {}\n", n.path, n.op, sym_shape_str(g.values[n.output].type.shape),
               params, declared_device(g, n));
  }
  fmt::print("\n");
  for (const GraphOutput& out : g.outputs)
    fmt::print("output {:<28} {}\n", out.name, sym_shape_str(g.values[out.value].type.shape));
  fmt::print("\n{} layers, {} parameters ({:.2f} MiB float32)\n", g.nodes.size(), g.parameter_count(),
             g.parameter_count() * 4.0 / (1 << 20));
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
