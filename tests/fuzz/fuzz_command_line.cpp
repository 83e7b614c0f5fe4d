// Fuzz target: a tandem command line, its arguments separated by NUL bytes. It is parsed by
// the real parser (every subcommand, every strict value) without running the command;
// what a parsed run, plan or train would then read from its flags (--bind, the device
// and placement flags) goes through the same functions it calls, and the policy is
// placed on a small model. Each either works or refuses with a UserError.
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_target.h"
#include "graph/load_graph.h"
#include "placement/place.h"
#include "runtime/cli/bind_option.h"
#include "runtime/cli/cli_app.h"
#include "runtime/cli/placement_options.h"

namespace {

const tandem::Graph& model() {
  static const tandem::Graph graph = tandem::load_graph_from_string(
      "name: fuzz\ninputs:\n  x: {shape: [batch, seq, 4]}\nlayers:\n"
      "  - {name: enc, layers: [{name: fc, op: linear, in_features: 4, out_features: 4}, {name: act, op: relu}]}\n"
      "  - name: dp\n    data_parallel: {devices: [cuda:0, cuda:1], output_device: cuda:0, dim: 0}\n"
      "    layers: [{name: fc, op: linear, in_features: 4, out_features: 4}]\n",
      "fuzz.yaml");
  return graph;
}

std::vector<std::string> results(const CLI::App& sub, const char* name) {
  try {
    const CLI::Option* option = sub.get_option(name);
    return option->count() > 0 ? option->results() : std::vector<std::string>{};
  } catch (const CLI::OptionNotFound&) {
    return {};
  }
}

/// What run, plan and train do with their flags before loading anything heavy.
void read_flags(const CLI::App& sub) {
  try {
    tandem::cli::parse_bind_options(results(sub, "--bind"), model());
  } catch (const tandem::UserError&) {
  }
  tandem::cli::PlacementFlags flags;
  auto first = [&](const char* name) {
    std::vector<std::string> r = results(sub, name);
    return r.empty() ? std::string() : r.back();
  };
  flags.sim_gpu_memory = first("--sim-gpu-memory");
  flags.placement = first("--placement");
  flags.max_memory = first("--max-memory");
  flags.place = results(sub, "--place");
  try {
    tandem::cli::device_options(flags);
    tandem::PlacementPolicy policy = tandem::cli::placement_policy(flags, model());
    tandem::DeviceInventory inventory;
    inventory.devices.push_back({tandem::Device::cuda(0), 1 << 16, true, "simulated GPU"});
    inventory.devices.push_back({tandem::Device::cuda(1), 1 << 16, true, "simulated GPU"});
    tandem::place(model(), inventory, policy);
  } catch (const tandem::UserError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  std::vector<std::string> args{"tandem"};
  std::string current;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current += static_cast<char>(data[i]);
    }
  }
  args.push_back(current);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());

  tandem::cli::CliApp cli = tandem::cli::make_cli_app();
  std::ostringstream out, err;
  std::optional<int> code =
      tandem::cli::parse_command_line(cli, static_cast<int>(argv.size()), argv.data(), out, err);
  if (code) {
    if (*code != 0 && err.str().rfind("error: ", 0) != 0) tandem::fuzz::crash("a refusal without 'error: '");
    if (err.str().find('\x1b') != std::string::npos || err.str().find('\0') != std::string::npos)
      tandem::fuzz::crash("a control character in a message: " + err.str());
    return 0;
  }
  for (const auto& [sub, command] : cli.commands)
    if (sub->parsed() && sub->get_name() != "check" && sub->get_name() != "devices") read_flags(*sub);
  return 0;
}
