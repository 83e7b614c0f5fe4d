// place(): the driver and passes 1-3 (who decides each layer's device). Passes 4 and 5
// are in partition.cpp and estimate.cpp.
#include "placement/place.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "core/memory_size.h"
#include "core/storage.h"
#include "graph/batch_dim.h"
#include "graph/text_similarity.h"
#include "placement/place_passes.h"
#include "placement/replicate.h"

namespace tandem {

const std::vector<std::string>& placement_policy_names() {
  static const std::vector<std::string> names = {"annotations", "embeddings-on-cpu", "balanced"};
  return names;
}

void apply_placement_spec(const PlacementSpec& spec, PlacementPolicy& policy) {
  policy.name = spec.policy;
  if (spec.max_memory) {
    try {
      parse_max_memory(*spec.max_memory, policy);
    } catch (const UserError& e) {
      throw UserError(spec.location.str() + ": placement max_memory " + e.what());
    }
  }
}

void parse_max_memory(std::string_view text, PlacementPolicy& policy) {
  if (text.empty()) throw UserError("is empty; write a size such as 8GiB, or DEVICE=SIZE items such as cuda:0=6GiB,cpu=20GiB");
  std::set<Device> named;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item(text.substr(start, comma - start));
    start = comma + 1;
    const size_t eq = item.find('=');
    const std::string size_text = eq == std::string::npos ? item : item.substr(eq + 1);
    std::optional<Device> device;
    if (eq != std::string::npos) {
      device = Device::parse(item.substr(0, eq));
      if (!device)
        throw UserError("'" + item + "': '" + item.substr(0, eq) + "' is not a device; write cpu or cuda:N, such as cuda:0=6GiB");
      if (!named.insert(*device).second) throw UserError("'" + item + "': " + device->str() + " is given a budget twice");
    }
    size_t bytes = 0;
    try {
      bytes = parse_memory_size(size_text);
    } catch (const UserError& e) {
      throw UserError("'" + item + "': " + e.what());
    }
    if (bytes == 0) throw UserError("'" + item + "': a budget must be more than 0 bytes");
    if (device)
      policy.device_max_memory[*device] = bytes;
    else
      policy.max_memory = bytes;
  }
}

size_t memory_budget(const PlacementPolicy& policy, Device device, size_t capacity) {
  size_t budget = 0;
  if (auto own = policy.device_max_memory.find(device); own != policy.device_max_memory.end())
    budget = own->second;
  else if (device.kind == DeviceKind::cuda && policy.max_memory)
    budget = *policy.max_memory;
  if (budget == 0) return capacity;
  return capacity ? std::min(budget, capacity) : budget;
}

bool glob_match(std::string_view p, std::string_view t) {
  // Iterative matcher with one backtrack point for the last `*` (linear for typical paths).
  size_t pi = 0, ti = 0, star = std::string_view::npos, star_t = 0;
  auto match_one = [&](size_t& pj, char c) -> bool {  // advances pj past the item; false on mismatch
    if (p[pj] == '?') { ++pj; return true; }
    if (p[pj] == '[') {
      size_t j = pj + 1;
      bool negate = j < p.size() && (p[j] == '!' || p[j] == '^');
      if (negate) ++j;
      bool found = false;
      size_t start = j;
      while (j < p.size() && (p[j] != ']' || j == start)) {
        if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
          if (p[j] <= c && c <= p[j + 2]) found = true;
          j += 3;
        } else {
          if (p[j] == c) found = true;
          ++j;
        }
      }
      if (j >= p.size()) {  // no closing bracket: a literal '['
        ++pj;
        return c == '[';
      }
      pj = j + 1;
      return found != negate;
    }
    return p[pj++] == c;
  };
  while (ti < t.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      star_t = ti;
      continue;
    }
    size_t pj = pi;
    if (pi < p.size() && match_one(pj, t[ti])) {
      pi = pj;
      ++ti;
      continue;
    }
    if (star == std::string_view::npos) return false;
    pi = star + 1;
    ti = ++star_t;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

namespace placement_detail {

std::string inventory_list(const DeviceInventory& inventory) {
  std::string s;
  for (const DeviceInfo& d : inventory.devices) s += (s.empty() ? "" : ", ") + d.device.str();
  return s;
}

PlaceContext make_context(const Graph& graph, const DeviceInventory& inventory, const PlacementPolicy& policy) {
  PlaceContext ctx{graph, inventory, policy, policy.bindings, {}, {}, {}, {}, 2, {}, {}, {}};
  if (policy.batch < 1) throw UserError("--batch must be at least 1; got " + std::to_string(policy.batch));
  ctx.bindings["batch"] = policy.batch;
  for (const std::string& symbol : graph.symbols())
    if (!ctx.bindings.count(symbol)) {
      ctx.bindings[symbol] = 1;
      ctx.plan.notes.push_back("symbol '" + symbol + "' has no value: byte estimates take it as 1 (bind it to count it)");
    }
  for (const Value& v : graph.values) {
    std::optional<int64_t> n = sym_numel(v.type.shape).evaluate(ctx.bindings);
    TANDEM_ASSERT(n.has_value(), "symbol of value '" + v.name + "' unbound after binding all graph symbols");
    ctx.value_bytes.push_back(static_cast<size_t>(std::max<int64_t>(*n, 0)) * dtype_size(v.type.dtype));
  }
  ctx.needs_grad.assign(graph.values.size(), false);
  for (const Node& n : graph.nodes) {
    size_t bytes = 0, pool_bytes = 0;
    for (const ParamSpec& p : n.params) {
      bytes += static_cast<size_t>(shape_numel(p.shape)) * sizeof(float);
      pool_bytes += allocation_bytes(static_cast<size_t>(shape_numel(p.shape)) * sizeof(float));
    }
    ctx.param_bytes.push_back(bytes);
    ctx.param_pool_bytes.push_back(pool_bytes);
    bool grad = !n.params.empty();
    for (int in : n.inputs) grad = grad || ctx.needs_grad[in];
    ctx.needs_grad[n.output] = grad && graph.values[n.output].type.dtype == DType::float32;
  }
  // Optimizer state per parameter byte: the model's own optimizer when it names one, else Adam.
  if (graph.training) {
    const OptimizerConfig& o = graph.training->optimizer;
    // Adam's two moments (SparseAdam's too, dense as torch's), Adagrad's sum of squares, SGD's
    // momentum; rowwise_adagrad's one value a row is too small to count
    ctx.optimizer_factor = (o.name == "adam" || o.name == "adamw" || o.name == "sparse_adam") ? 2
                           : (o.name == "adagrad" || o.momentum != 0)                          ? 1
                                                                                                : 0;
  }
  ctx.decisions.resize(graph.nodes.size());
  ctx.plan.policy = policy.name;
  ctx.plan.training = policy.training;
  ctx.plan.batch = policy.batch;
  return ctx;
}

size_t layer_footprint(const PlaceContext& ctx, int node) {
  size_t params = ctx.param_pool_bytes[node];
  size_t state = ctx.policy.training ? params + static_cast<size_t>(params * ctx.optimizer_factor) : 0;
  return params + state + allocation_bytes(ctx.value_bytes[ctx.graph.nodes[node].output]);
}

namespace {

// Where a node's device: came from: the layer itself or the outermost block of the run of
// enclosing blocks that carry the same device (children inherit, so that block wrote it).
std::string annotation_source(const Graph& g, const Node& n) {
  int declared = -1;
  for (int b = n.block; b >= 0 && g.blocks[b].device == n.device; b = g.blocks[b].parent) declared = b;
  if (declared < 0) return "device: on the layer";
  return "device: on block '" + g.blocks[declared].path + "'";
}

bool matches_path_or_block(const Graph& g, const Node& n, const std::string& pattern) {
  if (glob_match(pattern, n.path)) return true;
  for (int b = n.block; b >= 0; b = g.blocks[b].parent)
    if (glob_match(pattern, g.blocks[b].path)) return true;
  return false;
}

/// The data_parallel block whose replica, scatter or gather `n` is, when `pattern` names
/// it as the user wrote it: its path without the replica's "@k" ("net.fc" for
/// "net.fc@1"), or the block or a block around it; -1 otherwise.
int data_parallel_block_named(const Graph& g, const Node& n, const std::string& pattern) {
  if (!n.replica) return -1;
  if (glob_match(pattern, n.path) || glob_match(pattern, n.path.substr(0, n.path.find('@')))) return n.replica->block;
  for (int b = n.replica->block; b >= 0; b = g.blocks[b].parent)
    if (glob_match(pattern, g.blocks[b].path)) return n.replica->block;
  return -1;
}

/// A --place pattern that matches no layer and no block would change nothing: a typo. One
/// that matches only layers of data_parallel blocks would change nothing either: their
/// replicas run on the block's devices, whatever --place says.
void check_overrides_match(const Graph& g, const std::vector<std::pair<std::string, Device>>& overrides) {
  for (const auto& [pattern, device] : overrides) {
    bool matched = false;
    for (const Node& n : g.nodes) matched = matched || (!n.replica && matches_path_or_block(g, n, pattern));
    if (matched) continue;
    int block = -1;
    for (const Node& n : g.nodes)
      if (block < 0) block = data_parallel_block_named(g, n, pattern);
    if (block >= 0 && pattern != "*") {  // '*' is the whole model: run and train move it as one (--place '*=cpu')
      const DataParallelSpec& dp = *g.blocks[block].data_parallel;
      std::string devices;
      for (Device d : dp.devices) devices += (devices.empty() ? "" : ", ") + d.str();
      throw UserError("--place '" + pattern + "=" + device.str() + "' cannot take effect: it matches only layers of "
                      "data_parallel block '" + g.blocks[block].path + "', whose replicas run on its devices (" +
                      devices + ") and whose output is gathered on its output_device (" + dp.output_device.str() +
                      "); change those in the model file, or run the whole model on the cpu with --place '*=cpu'");
    }
    if (block >= 0) continue;
    std::vector<std::string> paths;
    for (const Node& n : g.nodes)
      if (!n.replica) paths.push_back(n.path);
    for (const Block& b : g.blocks) paths.push_back(b.path);
    std::string some;
    for (size_t i = 0; i < paths.size() && i < 6; ++i) some += (i ? ", " : "") + paths[i];
    if (paths.size() > 6) some += ", ...";
    throw UserError("--place '" + pattern + "=" + device.str() + "': the pattern matches no layer or block of model '" +
                    g.name + "'" + did_you_mean(pattern, paths) + "; its layers and blocks: " + some +
                    " (a pattern is a glob over paths such as 'encoder.*')");
  }
}

/// How many GPUs the model asks for: one more than the highest cuda index that a layer,
/// a block, a data_parallel block or a --place names.
int gpus_named(const Graph& g, const PlacementPolicy& policy) {
  int gpus = 0;
  auto count = [&](Device d) {
    if (d.kind == DeviceKind::cuda) gpus = std::max(gpus, d.index + 1);
  };
  for (const Node& n : g.nodes)
    if (n.device) count(*n.device);
  for (const Block& b : g.blocks) {
    if (b.device) count(*b.device);
    if (b.data_parallel) {
      for (Device d : b.data_parallel->devices) count(d);
      count(b.data_parallel->output_device);
    }
  }
  for (const auto& [pattern, d] : policy.place_overrides) count(d);
  return gpus;
}

/// "cpu, cuda:0" or, without GPUs, "no GPU (why)".
std::string what_machine_has(const DeviceInventory& inv) {
  if (inv.devices.size() > 1) return inventory_list(inv);
  return "no GPU" + (inv.no_gpu_reason.empty() ? std::string() : " (" + inv.no_gpu_reason + ")");
}

/// Both ways out of a device the machine lacks: simulated GPUs enough for the whole model,
/// or the cpu for every layer.
std::string run_with_hint(const PlaceContext& ctx, Device missing) {
  int gpus = std::max(gpus_named(ctx.graph, ctx.policy), missing.kind == DeviceKind::cuda ? missing.index + 1 : 0);
  return "run it on simulated GPUs with --sim-gpus " + std::to_string(std::max(gpus, 1)) +
         ", or on the cpu with --place '*=cpu'";
}

void check_exists(const PlaceContext& ctx, const std::string& what, Device d, const std::string& source) {
  if (ctx.inventory.has(d)) return;
  throw UserError(what + " is placed on " + d.str() + " (" + source + "), but this machine has " +
                  what_machine_has(ctx.inventory) + "; " + run_with_hint(ctx, d));
}

}  // namespace

void pass1_explicit(PlaceContext& ctx) {
  const Graph& g = ctx.graph;
  check_overrides_match(g, ctx.policy.place_overrides);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    Decision& d = ctx.decisions[i];
    for (auto it = ctx.policy.place_overrides.rbegin(); it != ctx.policy.place_overrides.rend(); ++it)
      if (matches_path_or_block(g, n, it->first)) {
        d = {it->second, "--place " + it->first + "=" + it->second.str(), "--place " + it->first + "=" + it->second.str(),
             true};
        break;
      }
    if (n.replica) {  // made by replicate_data_parallel: its device follows from the block
      const Block& block = g.blocks[n.replica->block];
      const DataParallelSpec& dp = *block.data_parallel;
      for (Device r : dp.devices)
        if (!ctx.inventory.has(r))
          throw UserError(block.location.str() + ": data_parallel block '" + block.path + "' lists " + r.str() +
                          " in its devices, but this machine has " + what_machine_has(ctx.inventory) + "; " +
                          run_with_hint(ctx, r));
      const std::string of = " of data_parallel '" + block.path + "'";
      const std::string count = std::to_string(n.replica->replicas);
      switch (n.replica->kind) {
        case ReplicaRole::Kind::scatter:  // decided by follow_scattered_inputs, where its input is
          d = {std::nullopt, "", "", true};
          continue;
        case ReplicaRole::Kind::replica:
          d = {*n.device, "replica " + std::to_string(n.replica->replica + 1) + "/" + count + of + " (devices)",
               "devices of data_parallel block '" + block.path + "'", true};
          break;
        case ReplicaRole::Kind::gather:
          d = {dp.output_device, "gathers the " + count + " replicas" + of + " on its output_device",
               "output_device of data_parallel block '" + block.path + "'", true};
          break;
      }
    } else if (!d.pinned) {
      if (n.device) {
        std::string source = annotation_source(g, n);
        d = {*n.device, "device: " + n.device->str() + source.substr(std::string("device:").size()), source, true};
      }
    }
    if (!d.pinned) continue;
    check_exists(ctx, (n.location.line > 0 ? n.location.str() + ": " : std::string()) + "layer '" + n.path + "'",
                 *d.device, d.source);
    const DeviceInfo* info = ctx.inventory.find(*d.device);
    if (info->memory_bytes > 0 && ctx.param_bytes[i] > info->memory_bytes)
      throw UserError("layer '" + n.path + "' is placed on " + d.device->str() + " (" + d.source + "), but its parameters alone need " +
                      format_bytes(ctx.param_bytes[i]) + " and " + d.device->str() + " has " +
                      format_bytes(info->memory_bytes) + "; place it on a larger device or on the cpu, or use "
                      "--placement balanced");
  }
}

namespace {

bool is_embedding(const Node& n) { return n.op == "embedding" || n.op == "embedding_bag"; }

// Layers in graph order fill the GPUs one after another. A layer that fits on no GPU from
// the current one onwards goes to the cpu and the cursor stays, so a large table in the
// middle does not push the layers after it off the GPUs.
//
// What a GPU is charged is what its pool may hold at once during a pass (pass 5's bound):
// each layer's parameters and output, each tensor it receives from another device, every
// one rounded as the pool rounds it; in training also room for the gradients of its two
// largest activations.
class GpuFiller {
 public:
  GpuFiller(PlaceContext& ctx, std::string label) : ctx_(ctx), label_(std::move(label)) {
    for (const DeviceInfo& d : ctx.inventory.devices)
      if (d.device.kind == DeviceKind::cuda) {
        size_t budget = memory_budget(ctx.policy, d.device, d.memory_bytes);
        if (auto cut = ctx.budget_cut.find(d.device); cut != ctx.budget_cut.end() && budget != 0)
          budget -= std::min(budget - 1, cut->second);  // 1 byte: a budget of 0 would mean "no limit"
        gpus_.push_back({d.device, budget});
      }
    std::sort(gpus_.begin(), gpus_.end(), [](const Gpu& a, const Gpu& b) { return a.device < b.device; });
    // Layers pinned by pass 1 already use their devices.
    for (size_t i = 0; i < ctx.decisions.size(); ++i)
      if (ctx.decisions[i].pinned && ctx.decisions[i].device)
        for (Gpu& gpu : gpus_)
          if (gpu.device == *ctx.decisions[i].device) take(gpu, static_cast<int>(i));
  }

  bool has_gpus() const { return !gpus_.empty(); }

  void place(int node) {
    Decision& d = ctx_.decisions[node];
    if (follow_producer(node)) return;
    for (size_t k = cursor_; k < gpus_.size(); ++k) {
      Gpu& gpu = gpus_[k];
      Gpu after = gpu;
      take(after, node);
      if (gpu.budget != 0 && after.charged() > gpu.budget) continue;
      cursor_ = k;
      gpu = std::move(after);
      d.device = gpu.device;
      d.reason = label_ + ": fits on " + gpu.device.str() + " (" + format_bytes(gpu.charged()) +
                 (gpu.budget ? " of " + format_bytes(gpu.budget) : std::string(", no limit")) + ")";
      return;
    }
    d.device = Device::cpu();
    d.reason = label_ + ": does not fit on any GPU (needs " + format_bytes(layer_footprint(ctx_, node)) + ") -> cpu";
  }

 private:
  struct Gpu {
    Device device;
    size_t budget;  // 0: no limit known
    size_t used = 0;
    size_t largest = 0, second = 0;  // activations, for the gradients of backward
    std::set<int> held;              // values it holds: made there or received
    size_t charged() const { return used + largest + second; }
  };

  /// A layer without parameters (an activation, a reshape, a norm without affine) costs
  /// nothing to run where its input already is and a copy anywhere else: it goes with the
  /// layer that produces its first input, the cpu included, unless that GPU's budget
  /// forbids. Without this, a layer the balancer sent to the cpu was followed by its
  /// activation back on the GPU, and the next layer on the cpu again: a 4-layer MLP made
  /// 7 copies per batch instead of 2. The cursor stays: the layers after it fill the GPUs
  /// as before.
  bool follow_producer(int node) {
    const Node& n = ctx_.graph.nodes[node];
    if (ctx_.param_bytes[node] != 0 || n.inputs.empty()) return false;
    const int producer = ctx_.graph.values[n.inputs[0]].producer;
    if (producer < 0 || !ctx_.decisions[producer].device) return false;  // a graph input: fill as usual
    const Device where = *ctx_.decisions[producer].device;
    Decision& d = ctx_.decisions[node];
    const std::string& from = ctx_.graph.nodes[producer].path;
    if (where.kind == DeviceKind::cpu) {
      d.device = where;
      d.reason = label_ + ": no parameters, stays with '" + from + "' on cpu";
      return true;
    }
    for (Gpu& gpu : gpus_) {
      if (gpu.device != where) continue;
      Gpu after = gpu;
      take(after, node);
      if (gpu.budget != 0 && after.charged() > gpu.budget) return false;
      gpu = std::move(after);
      d.device = where;
      d.reason = label_ + ": no parameters, stays with '" + from + "' on " + where.str() + " (" +
                 format_bytes(gpu.charged()) + (gpu.budget ? " of " + format_bytes(gpu.budget) : std::string(", no limit")) +
                 ")";
      return true;
    }
    return false;
  }

  /// Charges `gpu` for `node`: its footprint and the inputs it does not hold yet.
  void take(Gpu& gpu, int node) const {
    const Node& n = ctx_.graph.nodes[node];
    gpu.used += layer_footprint(ctx_, node);
    auto hold = [&](int value) {
      if (!gpu.held.insert(value).second) return size_t{0};
      size_t bytes = allocation_bytes(ctx_.value_bytes[value]);
      if (ctx_.policy.training && ctx_.needs_grad[value]) {
        if (bytes > gpu.largest) gpu.second = gpu.largest, gpu.largest = bytes;
        else if (bytes > gpu.second) gpu.second = bytes;
      }
      return bytes;
    };
    for (int in : n.inputs) gpu.used += hold(in);
    hold(n.output);  // its bytes are in the footprint
  }

  PlaceContext& ctx_;
  std::string label_;
  std::vector<Gpu> gpus_;
  size_t cursor_ = 0;
};

}  // namespace

void pass2_policy(PlaceContext& ctx) {
  const std::string& name = ctx.policy.name;
  const auto& names = placement_policy_names();
  if (std::find(names.begin(), names.end(), name) == names.end())
    throw UserError("unknown placement policy '" + name + "'; write annotations, embeddings-on-cpu or balanced");
  GpuFiller filler(ctx, name);
  bool any_open = false;
  for (size_t i = 0; i < ctx.graph.nodes.size(); ++i) {
    Decision& d = ctx.decisions[i];
    if (d.pinned) continue;
    any_open = true;
    const Node& n = ctx.graph.nodes[i];
    if (name == "annotations") {
      d.device = Device::cpu();
      d.reason = "no device: or --place -> cpu";
    } else if (name == "embeddings-on-cpu" && is_embedding(n)) {
      d.device = Device::cpu();
      d.reason = "embeddings-on-cpu: embedding table";
    } else if (!filler.has_gpus()) {
      d.device = Device::cpu();
      d.reason = name + ": no GPU -> cpu";
    } else {
      filler.place(static_cast<int>(i));
    }
  }
  if (any_open && name != "annotations" && !filler.has_gpus())
    ctx.plan.notes.push_back("policy " + name + " found no GPU on this machine: its layers run on the cpu "
                             "(--sim-gpus N simulates GPUs)");
}

void pass3_fallback(PlaceContext& ctx) {
  if (!ctx.policy.cannot_run) return;
  for (size_t i = 0; i < ctx.graph.nodes.size(); ++i) {
    Decision& d = ctx.decisions[i];
    if (d.device->kind == DeviceKind::cpu) continue;
    const std::string why = ctx.policy.cannot_run(*d.device, ctx.graph, ctx.graph.nodes[i], ctx.bindings);
    if (why.empty()) continue;
    d.reason += "; " + d.device->str() + " cannot run it (" + why + ") -> cpu";
    d.device = Device::cpu();
  }
}


void follow_scattered_inputs(PlaceContext& ctx) {
  // In graph order, so the input's producer is decided (a graph input lives on the cpu).
  const Graph& g = ctx.graph;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!n.replica || n.replica->kind != ReplicaRole::Kind::scatter) continue;
    int producer = g.values[n.inputs[0]].producer;
    Decision& d = ctx.decisions[i];
    d.device = producer >= 0 ? *ctx.decisions[producer].device : Device::cpu();
    d.reason = "scatters chunk " + std::to_string(n.replica->replica + 1) + "/" + std::to_string(n.replica->replicas) +
               " of data_parallel '" + g.blocks[n.replica->block].path + "' where its input is: dim " +
               std::to_string(n.attrs.get_int("dim")) + ", " + sym_shape_str(g.values[n.output].type.shape) + " of " +
               sym_shape_str(g.values[n.inputs[0]].type.shape);
  }
}

}  // namespace placement_detail

namespace {

/// The symbol values place() plans for: the policy's, `batch`, and 1 for the rest.
Bindings planned_bindings(const Graph& graph, const PlacementPolicy& policy) {
  Bindings b = policy.bindings;
  b["batch"] = std::max<int64_t>(policy.batch, 1);
  for (const std::string& symbol : graph.symbols()) b.emplace(symbol, 1);
  return b;
}

}  // namespace

namespace {

/// `graph` with every `devices: all` filled in with the inventory's GPUs, in order; null
/// when no block says all. UserError naming the block when there is no GPU.
std::shared_ptr<const Graph> with_all_devices(const Graph& graph, const DeviceInventory& inventory) {
  if (std::none_of(graph.blocks.begin(), graph.blocks.end(),
                   [](const Block& b) { return b.data_parallel && b.data_parallel->all_devices; }))
    return nullptr;
  std::vector<Device> gpus;
  for (const DeviceInfo& info : inventory.devices)
    if (info.device.kind == DeviceKind::cuda) gpus.push_back(info.device);
  auto resolved = std::make_shared<Graph>(graph);
  for (Block& b : resolved->blocks) {
    if (!b.data_parallel || !b.data_parallel->all_devices) continue;
    if (gpus.empty())
      throw UserError(b.location.str() + ": data_parallel block '" + b.path + "' has devices: all, but this machine has " +
                      "no GPU" + (inventory.no_gpu_reason.empty() ? "" : " (" + inventory.no_gpu_reason + ")") +
                      "; run it on simulated GPUs with --sim-gpus N, or on the cpu with --place '*=cpu'");
    b.data_parallel->devices = gpus;
  }
  return resolved;
}

}  // namespace

Plan place(const Graph& given, const DeviceInventory& inventory, const PlacementPolicy& policy) {
  // devices: all means this inventory's GPUs: fill them in, then plan as if listed
  const std::shared_ptr<const Graph> all_resolved = with_all_devices(given, inventory);
  const Graph& original = all_resolved ? *all_resolved : given;
  using namespace placement_detail;
  TANDEM_ASSERT(inventory.has(Device::cpu()), "a device inventory always has the cpu");
  if (policy.batch < 1) throw UserError("--batch must be at least 1; got " + std::to_string(policy.batch));
  for (const auto& [device, bytes] : policy.device_max_memory)
    if (!inventory.has(device))
      throw UserError("max_memory gives " + device.str() + " a budget of " + format_bytes(bytes) +
                      ", but this machine has " + placement_detail::inventory_list(inventory) +
                      "; name a device it has (or simulate GPUs with --sim-gpus N)");
  auto memory_of = [&](Device d) -> size_t {
    const DeviceInfo* info = inventory.find(d);
    return memory_budget(policy, d, info ? info->memory_bytes : 0);
  };
  std::shared_ptr<const Graph> replicated =
      replicate_data_parallel(original, planned_bindings(original, policy), policy.training, memory_of);
  const Graph& graph = replicated ? *replicated : original;
  // The balancer charges each layer as it goes; pass 5 then bounds what each pool may hold
  // with every copy and gradient in place. Where a GPU's bound comes out above its budget
  // (copies the balancer could not foresee: a loss's target, a scatter), plan again with
  // that GPU's budget cut by the excess, until every GPU the balancer filled fits. Each
  // round moves layers off a GPU or stops, so the rounds are at most the layers.
  std::map<Device, size_t> budget_cut;
  for (size_t round = 0;; ++round) {
    PlaceContext ctx = make_context(graph, inventory, policy);
    ctx.plan.graph = replicated;
    ctx.budget_cut = budget_cut;
    pass1_explicit(ctx);
    pass2_policy(ctx);
    follow_scattered_inputs(ctx);
    pass3_fallback(ctx);
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      const Decision& d = ctx.decisions[i];
      const PrecisionChoice precision = policy.runs_in
                                            ? policy.runs_in(*d.device, graph, graph.nodes[i], ctx.bindings)
                                            : PrecisionChoice{layer_precision(graph, graph.nodes[i]), {}};
      ctx.plan.steps.push_back({static_cast<int>(i), *d.device, d.reason, ctx.param_bytes[i],
                                ctx.value_bytes[graph.nodes[i].output], precision});
    }
    pass4_partition(ctx);
    pass5_estimate(ctx);
    for (std::string& note : scatter_dim_notes(original)) ctx.plan.notes.push_back(std::move(note));
    for (DeviceEstimate& e : ctx.plan.estimates) e.budget_bytes = memory_of(e.device);
    bool replan = false;
    for (const DeviceEstimate& e : ctx.plan.estimates) {
      const size_t budget = memory_of(e.device);
      if (e.device.kind != DeviceKind::cuda || budget == 0 || e.peak_bytes <= budget) continue;
      bool balanced_here = false;  // a layer the balancer put there, not one pinned there
      for (size_t i = 0; i < graph.nodes.size(); ++i)
        balanced_here = balanced_here || (!ctx.decisions[i].pinned && ctx.decisions[i].device == e.device);
      if (balanced_here && round <= graph.nodes.size()) {
        budget_cut[e.device] += e.peak_bytes - budget;
        replan = true;
      } else {
        ctx.plan.notes.push_back(e.device.str() + " is predicted to need " + format_bytes(e.peak_bytes) + " of its " +
                                 format_bytes(budget) + " for the layers placed there by device: or --place; the run "
                                 "may run out of memory (place fewer layers there, or a smaller batch)");
      }
    }
    if (!replan) return std::move(ctx.plan);
  }
}

Plan place_on_cpu(const Graph& graph, const DeviceInventory& inventory, const PlacementPolicy& policy) {
  // The same graph without devices or data_parallel, placed on an inventory of the cpu
  // alone: node indices stay the given graph's, and the estimate is the cpu's.
  Graph unplaced = graph;
  for (Node& n : unplaced.nodes) n.device.reset();
  for (Block& b : unplaced.blocks) {
    b.device.reset();
    b.data_parallel.reset();
  }
  DeviceInventory cpu_only;
  if (const DeviceInfo* cpu = inventory.find(Device::cpu())) cpu_only.devices = {*cpu};
  PlacementPolicy on_cpu = policy;
  on_cpu.name = "annotations";
  on_cpu.place_overrides.clear();
  std::erase_if(on_cpu.device_max_memory, [](const auto& entry) { return entry.first != Device::cpu(); });
  Plan plan = place(unplaced, cpu_only, on_cpu);
  const Plan reasons = plan_on_cpu(graph);  // why each layer is on the cpu, as the file has it
  for (size_t i = 0; i < plan.steps.size() && i < reasons.steps.size(); ++i) plan.steps[i].reason = reasons.steps[i].reason;
  plan.policy = "cpu";
  return plan;
}

}  // namespace tandem
