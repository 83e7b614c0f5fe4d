// Pass 4: cut the placed layers into same-device segments and insert the copies.
//
// The copy rule: every value has a home (its producer's device; the cpu for graph inputs
// and targets). A step that reads a value whose home is another device gets it by one
// copy per (value, destination device), inserted before the first reader there; later
// readers on that device share it, so a tensor read by several layers on another device
// crosses once. Parameters are never copied: they live with their layer. At the end of
// inference the graph outputs are gathered to the cpu; in training the loss runs on the
// device of the tensor it scores, and its target is copied there. Each forward copy of a
// value that needs a gradient has a backward copy of that gradient, the other way.
#include <map>
#include <utility>

#include "placement/place_passes.h"

namespace tandem::placement_detail {
namespace {

void add_segments(PlaceContext& ctx) {
  const std::vector<OpStep>& steps = ctx.plan.steps;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (ctx.plan.segments.empty() || ctx.plan.segments.back().device != steps[i].device)
      ctx.plan.segments.push_back({steps[i].device, static_cast<int>(i), static_cast<int>(i)});
    ctx.plan.segments.back().end_step = static_cast<int>(i) + 1;
  }
}

}  // namespace

void pass4_partition(PlaceContext& ctx) {
  const Graph& g = ctx.graph;
  Plan& plan = ctx.plan;
  add_segments(ctx);

  std::vector<Device> home(g.values.size(), Device::cpu());  // inputs and targets: cpu
  for (const OpStep& s : plan.steps) home[g.nodes[s.node].output] = s.device;

  std::map<std::pair<int, Device>, size_t> copied;  // (value, destination) -> index in copies
  auto need = [&](int value, Device to, int before_step, const std::string& reason) {
    if (home[value] == to || copied.count({value, to})) return;
    copied[{value, to}] = plan.copies.size();
    plan.copies.push_back({value, home[value], to, ctx.value_bytes[value], true, before_step, reason});
  };
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const OpStep& s = plan.steps[i];
    const Node& n = g.nodes[s.node];
    for (int in : n.inputs) need(in, s.device, static_cast<int>(i), "read by '" + n.path + "' on " + s.device.str());
  }
  const int end = static_cast<int>(plan.steps.size());
  if (ctx.policy.training && g.parallel_loss) {
    // Each replica's rows of the target go to it (the runtime slices them on the host).
    const size_t target_bytes = ctx.value_bytes[g.loss->target];
    const int64_t rows = g.parallel_loss->parts.back().start + g.parallel_loss->parts.back().length;
    for (const ParallelLoss::Part& part : g.parallel_loss->parts) {
      Device to = home[part.value];
      if (to == Device::cpu()) continue;
      plan.copies.push_back({g.loss->target, Device::cpu(), to, target_bytes / static_cast<size_t>(rows) * part.length,
                             true, end, "rows of the target for the parallel loss on " + to.str()});
    }
  } else if (ctx.policy.training && g.loss) {
    Device loss_device = home[g.loss->input];
    need(g.loss->target, loss_device, end, "target of the loss, which runs on " + loss_device.str());
  } else {
    for (const GraphOutput& out : g.outputs)
      need(out.value, Device::cpu(), end, "graph output '" + out.name + "' gathered to the cpu");
  }

  if (!ctx.policy.training) return;
  // Backward runs the steps in reverse, so the gradient copies come in reverse order.
  size_t forward = plan.copies.size();
  for (size_t k = forward; k-- > 0;) {
    CopyStep c = plan.copies[k];
    if (!ctx.needs_grad[c.value] || c.before_step == end) continue;
    std::swap(c.from, c.to);
    c.forward = false;
    c.reason = "gradient of '" + g.values[c.value].name + "' back to " + c.to.str();
    plan.copies.push_back(std::move(c));
  }
}

}  // namespace tandem::placement_detail
