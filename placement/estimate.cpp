// Pass 5: bytes per device (docs/placement.md: memory estimate).
//
// Parameters are float32. Training adds one gradient per parameter and the optimizer's
// state (Adam/AdamW: 2x the parameters; SGD with momentum 1x, without 0; a model with no
// train: section is counted as Adam) and keeps every activation for backward: the
// activations of a device are all the buffers it holds (its layers' outputs, the copies it
// receives, and on the cpu the graph inputs). Inference frees a buffer after its last
// reader: the activations of a device are its largest live set over the steps.
// Workspace, allocator rounding and gradient buffers of activations are not counted.
#include <algorithm>
#include <map>

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
};

std::vector<Buffer> buffers(const PlaceContext& ctx) {
  const Graph& g = ctx.graph;
  const Plan& plan = ctx.plan;
  const int end = static_cast<int>(plan.steps.size());
  std::map<std::pair<int, Device>, Buffer> live;  // (value, device)
  auto touch = [&](int value, Device d, int step) {
    auto it = live.find({value, d});
    if (it == live.end())
      live.emplace(std::make_pair(value, d), Buffer{d, ctx.value_bytes[value], step, step});
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
  for (const GraphOutput& out : g.outputs) touch(out.value, plan.steps[g.values[out.value].producer].device, end);
  std::vector<Buffer> result;
  for (auto& [key, b] : live) result.push_back(b);
  return result;
}

}  // namespace

void pass5_estimate(PlaceContext& ctx) {
  Plan& plan = ctx.plan;
  const int n = static_cast<int>(plan.steps.size()) + 1;
  std::vector<Buffer> all = buffers(ctx);
  for (const DeviceInfo& info : ctx.inventory.devices) {
    DeviceEstimate e;
    e.device = info.device;
    e.capacity_bytes = info.memory_bytes;
    for (const OpStep& s : plan.steps)
      if (s.device == info.device) e.parameter_bytes += s.parameter_bytes;
    if (ctx.policy.training) {
      e.gradient_bytes = e.parameter_bytes;
      e.optimizer_bytes = static_cast<size_t>(e.parameter_bytes * ctx.optimizer_factor);
      for (const Buffer& b : all)
        if (b.device == info.device) e.activation_bytes += b.bytes;
    } else {
      std::vector<int64_t> delta(n + 1, 0);
      for (const Buffer& b : all)
        if (b.device == info.device) {
          delta[b.first] += static_cast<int64_t>(b.bytes);
          delta[b.last + 1] -= static_cast<int64_t>(b.bytes);
        }
      int64_t live = 0, peak = 0;
      for (int i = 0; i < n; ++i) peak = std::max(peak, live += delta[i]);
      e.activation_bytes = static_cast<size_t>(peak);
    }
    e.peak_bytes = e.parameter_bytes + e.activation_bytes + e.gradient_bytes + e.optimizer_bytes;
    plan.estimates.push_back(e);
  }
}

}  // namespace tandem::placement_detail
