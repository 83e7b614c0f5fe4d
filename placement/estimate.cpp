// Pass 5: bytes per device (docs/placement.md: memory estimate), where the runtime keeps
// them: the master copy of every parameter, its gradient and the optimizer's state on the
// host (the cpu); on a GPU, a copy of each parameter its layers use and, in training, a
// gradient buffer for it, once per device however many layers share it; a GPU that holds a
// parameter no cpu layer reads also keeps that parameter's optimizer state.
//
// Training on a GPU keeps every activation for backward: the activations of a device are
// all the buffers it holds (its layers' outputs, the copies it receives), plus, during
// backward, the gradients of the two largest (an output's and an input's, alive together).
// The cpu's are walked step by step as the executor frees them (cpu_training_memory.cpp).
// A table that keeps its gradient as rows (`sparse: true`) has
// the rows a batch looks up for a gradient, not a dense one. The cpu also holds a GPU's parameter gradients once more on
// their way to the master. Inference on a GPU counts every buffer too (the host submits
// ahead of the GPU's queue, so all may be held at once); on the cpu a buffer is freed after
// its last reader, and the activations are its largest live set over the steps. Every
// tensor is counted as the pools round it (core/storage.h: allocation_bytes); kernels'
// workspaces are not counted. A training step may hold the next batch's uploads and the
// cpu's lookups of its tables beside its own (Note [the next batch ahead] in
// runtime/exec/training_executor.h): counted on each device, whether that overlap is on or
// not (the plan does not know the optimizer, which decides which tables go ahead).
#include <algorithm>
#include <map>

#include "core/storage.h"
#include "graph/op_schema.h"
#include "graph/row_gradient_tables.h"
#include "placement/place_passes.h"

namespace tandem::placement_detail {
namespace {

// One buffer on one device: alive from step `first` to step `last` (inclusive); steps run
// 0..n, step n being the end of the plan (output gathers).
struct Buffer {
  Device device;
  size_t bytes;
  int first;
  int last;
  int value;
};

std::vector<Buffer> buffers(const PlaceContext& ctx) {
  const Graph& g = ctx.graph;
  const Plan& plan = ctx.plan;
  const int end = static_cast<int>(plan.steps.size());
  std::map<std::pair<int, Device>, Buffer> live;  // (value, device)
  auto touch = [&](int value, Device d, int step) {
    auto it = live.find({value, d});
    if (it == live.end())
      live.emplace(std::make_pair(value, d), Buffer{d, allocation_bytes(ctx.value_bytes[value]), step, step, value});
    else
      it->second.last = std::max(it->second.last, step);
  };
  for (const GraphInput& in : g.inputs) touch(in.value, Device::cpu(), 0);
  if (ctx.policy.training)
    for (const GraphInput& t : g.targets) touch(t.value, Device::cpu(), 0);
  for (const CopyStep& c : plan.copies) {
    if (!c.forward) continue;
    touch(c.value, c.from, c.before_step);
    touch(c.value, c.to, c.before_step);
  }
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const OpStep& s = plan.steps[i];
    const Node& n = g.nodes[s.node];
    for (int in : n.inputs) touch(in, s.device, static_cast<int>(i));
    touch(n.output, s.device, static_cast<int>(i));
  }
  for (const GraphOutput& out : g.outputs) {
    // no producer: a graph input (on the cpu, counted above), or in training with a
    // parallel loss an output the replicas score where they are and nobody gathers
    const int producer = g.values[out.value].producer;
    if (producer >= 0) touch(out.value, plan.steps[producer].device, end);
  }
  std::vector<Buffer> result;
  for (auto& [key, b] : live) result.push_back(b);
  return result;
}

/// What a training step may hold of the next batch on `device` (Note [the next batch
/// ahead]): on a GPU the graph inputs uploaded to it, on the cpu the outputs of its lookups
/// of graph inputs (embedding tables).
size_t next_batch_bytes(const PlaceContext& ctx, Device device) {
  const Graph& g = ctx.graph;
  auto is_input = [&](int value) { return g.values[value].producer < 0; };
  size_t bytes = 0;
  for (const CopyStep& c : ctx.plan.copies)
    if (c.forward && c.to == device && is_input(c.value)) bytes += allocation_bytes(ctx.value_bytes[c.value]);
  if (device != Device::cpu()) return bytes;
  for (const OpStep& s : ctx.plan.steps) {
    const Node& n = g.nodes[s.node];
    if (s.device != device || (n.op != "embedding" && n.op != "embedding_bag")) continue;
    if (std::all_of(n.inputs.begin(), n.inputs.end(), is_input)) bytes += allocation_bytes(ctx.value_bytes[n.output]);
  }
  return bytes;
}

/// The gradient a row-gradient table holds (core/touched_rows.h): a row for each id a batch
/// looks up, at most the table's rows, in a buffer that grows by doubling from 64 rows; while
/// it grows the old half is alive beside it.
size_t row_gradient_bytes(const PlaceContext& ctx, const Node& table) {
  const ParamSpec& weight = table.params.at(0);
  const Value& ids = ctx.graph.values[table.inputs.at(0)];
  const int64_t looked_up = static_cast<int64_t>(ctx.value_bytes[table.inputs.at(0)] / dtype_size(ids.type.dtype));
  const int64_t rows = std::min(weight.shape.at(0), looked_up);
  int64_t capacity = 64;
  while (capacity < rows) capacity *= 2;
  const size_t row_bytes = static_cast<size_t>(weight.shape.at(1)) * dtype_size(weight.dtype);
  return allocation_bytes(capacity * row_bytes) + (capacity > 64 ? allocation_bytes(capacity / 2 * row_bytes) : 0);
}


/// Inference on the cpu as the forward executor lays it out (runtime/exec/buffer_plan.h):
/// the intermediates a cpu layer makes and only cpu layers read share a few buffers, each
/// handed to a later tensor once its tensor's last reader has run (best fit, else the
/// largest free one grown, else a new one), all held for the executor's life; what the
/// pass allocates as it runs (the outputs, what crosses to another device) is live from its
/// step to its last reader, the graph inputs and outputs throughout (the caller holds them:
/// an output a GPU makes comes to the host, copied or at the end).
size_t cpu_inference_bytes(const PlaceContext& ctx, const std::vector<Buffer>& all) {
  const Graph& g = ctx.graph;
  const Plan& plan = ctx.plan;
  const int n = static_cast<int>(plan.steps.size());
  std::vector<int> root(g.values.size());  // a view's storage is its input's
  for (size_t v = 0; v < root.size(); ++v) root[v] = static_cast<int>(v);
  std::vector<bool> local(g.values.size(), false), is_view_output(g.values.size(), false);
  for (const OpStep& s : plan.steps) {
    const Node& node = g.nodes[s.node];
    const OpSchema* schema = find_op_schema(node.op);
    if (schema && schema->is_view && !node.inputs.empty()) {
      root[node.output] = root[node.inputs[0]];
      is_view_output[node.output] = true;
    } else {
      local[node.output] = s.device == Device::cpu();
    }
  }
  for (const GraphOutput& out : g.outputs) local[root[out.value]] = false;
  for (const CopyStep& c : plan.copies) local[root[c.value]] = false;
  std::vector<int> last_use(g.values.size(), -1);
  for (int i = 0; i < n; ++i) {
    const Node& node = g.nodes[plan.steps[i].node];
    for (int in : node.inputs) {
      if (plan.steps[i].device != Device::cpu()) local[root[in]] = false;
      last_use[root[in]] = std::max(last_use[root[in]], i);
    }
    last_use[root[node.output]] = std::max(last_use[root[node.output]], i);
  }
  // the buffers, walked as plan_buffers walks the schedule
  std::vector<size_t> buffer_bytes;
  std::vector<int> free, held(g.values.size(), -1);
  for (int i = 0; i < n; ++i) {
    const Node& node = g.nodes[plan.steps[i].node];
    const int out = node.output;
    if (local[out]) {
      const size_t need = ctx.value_bytes[out];
      int best = -1;
      for (int b : free)
        if (buffer_bytes[b] >= need && (best < 0 || buffer_bytes[b] < buffer_bytes[best])) best = b;
      if (best < 0 && !free.empty()) {
        best = *std::max_element(free.begin(), free.end(), [&](int x, int y) { return buffer_bytes[x] < buffer_bytes[y]; });
        buffer_bytes[best] = need;
      }
      if (best < 0) {
        buffer_bytes.push_back(need);
        best = static_cast<int>(buffer_bytes.size()) - 1;
      } else {
        free.erase(std::find(free.begin(), free.end(), best));
      }
      held[out] = best;
    }
    auto release = [&](int value) {
      const int r = root[value];
      if (last_use[r] == i && held[r] >= 0) {
        free.push_back(held[r]);
        held[r] = -1;
      }
    };
    for (int in : node.inputs) release(in);
    release(out);
  }
  size_t held_bytes = 0;
  for (size_t b : buffer_bytes) held_bytes += allocation_bytes((b + 7) / 8 * 8);
  // the rest: live from the step that makes it to its last reader, graph inputs throughout
  std::vector<bool> graph_input(g.values.size(), false);
  std::vector<bool> graph_output(g.values.size(), false);
  for (const GraphInput& in : g.inputs) graph_input[in.value] = true;
  for (const GraphOutput& out : g.outputs) graph_output[out.value] = true;
  // what a copy sends to a GPU: the copy runs on the GPU's queue, which the host submits
  // ahead of, so the tensor may be held until the host has made the rest of the pass
  std::vector<bool> sent(g.values.size(), false);
  for (const CopyStep& c : plan.copies)
    if (c.forward && c.from == Device::cpu()) sent[c.value] = true;
  std::vector<int64_t> delta(n + 2, 0);
  for (const Buffer& b : all) {
    if (b.device != Device::cpu() || (b.value >= 0 && (local[b.value] || is_view_output[b.value]))) continue;
    const bool held = b.value >= 0 && (graph_input[b.value] || graph_output[b.value] || sent[b.value]);
    const int last = held ? n : b.last;
    delta[b.first] += static_cast<int64_t>(b.bytes);
    delta[last + 1] -= static_cast<int64_t>(b.bytes);
  }
  // an output a GPU makes, and the plan copies nowhere, comes to the host at the end of the
  // pass, as the caller gets it
  for (const GraphOutput& out : g.outputs) {
    const int producer = g.values[out.value].producer;
    const bool on_host = std::any_of(all.begin(), all.end(), [&](const Buffer& b) {
      return b.value == out.value && b.device == Device::cpu();
    });
    if (producer >= 0 && !on_host) {
      delta[n] += static_cast<int64_t>(allocation_bytes(ctx.value_bytes[out.value]));
      delta[n + 1] -= static_cast<int64_t>(allocation_bytes(ctx.value_bytes[out.value]));
    }
  }
  int64_t live = 0, peak = 0;
  for (int i = 0; i <= n; ++i) peak = std::max(peak, live += delta[i]);
  return held_bytes + static_cast<size_t>(peak);
}

}  // namespace

void pass5_estimate(PlaceContext& ctx) {
  const Graph& g = ctx.graph;
  Plan& plan = ctx.plan;
  std::vector<Buffer> all = buffers(ctx);
  auto param_bytes = [](const ParamSpec& p) {
    return allocation_bytes(static_cast<size_t>(shape_numel(p.shape)) * dtype_size(p.dtype));
  };

  // Parameters by name (replicas and shared layers name the same ones): all of them on the
  // host, each GPU's own once.
  std::map<std::string, const ParamSpec*> every;
  std::map<Device, std::map<std::string, const ParamSpec*>> on_device;
  std::map<std::string, bool> read_on_cpu;
  for (const OpStep& s : plan.steps)
    for (const ParamSpec& p : g.nodes[s.node].params) {
      every.emplace(p.name, &p);
      if (s.device != Device::cpu()) on_device[s.device].emplace(p.name, &p);
      read_on_cpu[p.name] = read_on_cpu[p.name] || s.device == Device::cpu();
    }
  // A trainable parameter that no cpu layer reads is held by its GPUs in training, each with
  // its own optimizer state (runtime/params/device_parameter_cache.h: where a master lives); the
  // host's copy and state stay as well.
  auto held_state = [&](Device d) {
    size_t bytes = 0;
    if (on_device.count(d))
      for (const auto& [name, p] : on_device[d])
        if (p->trainable && !read_on_cpu[name]) bytes += param_bytes(*p);
    return static_cast<size_t>(bytes * ctx.optimizer_factor);
  };
  auto sum = [&](const std::map<std::string, const ParamSpec*>& params, bool trainable_only) {
    size_t bytes = 0;
    for (const auto& [name, p] : params)
      if (!trainable_only || p->trainable) bytes += param_bytes(*p);
    return bytes;
  };
  // The host's gradients: dense, one per trainable parameter, but for the tables that keep
  // theirs as rows (a 1,000,000 x 64 table's gradient is the rows a batch looked up).
  const std::set<std::string> row_tables = ctx.policy.training ? row_gradient_tables(g) : std::set<std::string>{};
  std::map<std::string, size_t> row_gradients;
  for (const OpStep& s : plan.steps) {
    const Node& node = g.nodes[s.node];
    if (!node.params.empty() && row_tables.count(node.params[0].name))
      row_gradients[node.params[0].name] = row_gradient_bytes(ctx, node);
  }
  auto host_gradient_bytes = [&] {
    size_t bytes = 0;
    for (const auto& [name, p] : every)
      if (p->trainable) bytes += row_gradients.count(name) ? row_gradients[name] : param_bytes(*p);
    return bytes;
  };
  // Each step the GPUs' gradients come to the host and are added to the master one device's
  // bucket after another: about one device's worth is there at a time.
  size_t gpu_gradients = 0;
  for (const auto& [device, params] : on_device) gpu_gradients = std::max(gpu_gradients, sum(params, true));

  for (const DeviceInfo& info : ctx.inventory.devices) {
    DeviceEstimate e;
    e.device = info.device;
    e.capacity_bytes = info.memory_bytes;
    const bool host = info.device == Device::cpu();
    e.parameter_bytes = host ? sum(every, false) : on_device.count(info.device) ? sum(on_device[info.device], false) : 0;
    if (ctx.policy.training && host) {
      // the activations and their gradients as the step holds them (cpu_training_memory.cpp)
      const CpuTrainingLiveBytes live = cpu_training_live_bytes(ctx);
      e.activation_bytes = live.activations + next_batch_bytes(ctx, info.device);
      e.gradient_bytes = host_gradient_bytes() + gpu_gradients + live.gradients;
      e.optimizer_bytes = static_cast<size_t>(sum(every, true) * ctx.optimizer_factor);
    } else if (ctx.policy.training) {
      // A GPU's host submits ahead of its queue: every activation is counted as kept, and
      // during backward the gradients of the two largest (an output's and an input's).
      size_t largest = 0, second = 0;
      for (const Buffer& b : all)
        if (b.device == info.device) {
          e.activation_bytes += b.bytes;
          if (b.bytes > largest) second = largest, largest = b.bytes;
          else if (b.bytes > second) second = b.bytes;
        }
      e.activation_bytes += next_batch_bytes(ctx, info.device);
      e.gradient_bytes = (on_device.count(info.device) ? sum(on_device[info.device], true) : 0) + largest + second;
      e.optimizer_bytes = held_state(info.device);
    } else if (!host) {
      // A GPU runs its layers from a queue the host submits ahead of it, and a buffer goes
      // back to the pool once the last task reading it has run: the host may have made
      // every buffer of the pass before the GPU frees the first, so all of them count.
      for (const Buffer& b : all)
        if (b.device == info.device) e.activation_bytes += b.bytes;
    } else {
      e.activation_bytes = cpu_inference_bytes(ctx, all);
    }
    e.peak_bytes = e.parameter_bytes + e.activation_bytes + e.gradient_bytes + e.optimizer_bytes;
    plan.estimates.push_back(e);
  }
}

}  // namespace tandem::placement_detail
