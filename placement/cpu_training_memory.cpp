// The cpu's activations and activation gradients at the peak of a training step, walked as
// the training executor holds them (runtime/exec/liveness.cpp, training_backward.cpp):
//
// - forward step i runs at time i, the loss at n, the backward of step i at 2n - i;
// - a layer's output lives from its step to its last forward reader, unless a backward
//   reads it (Kernel::backward_reads_input/output, asked through
//   PlacementPolicy::backward_reads): then to its producer's backward. Graph inputs,
//   targets and outputs are held throughout; a view (flatten, reshape) is its input's
//   storage, alive as long as either needs it;
// - a gradient is made by its first contribution in backward (the last reader's backward,
//   the loss, or the copy that brings it back from a GPU), a later contribution is computed
//   aside and added (alive for that moment), and it goes with its producer's backward.
//
// Counted as "every activation kept, plus the two largest gradients", digits_cnn's cpu at
// batch 32 was predicted 2.1 MiB against 1.4 MiB measured: its batch norms' outputs are
// read by no backward and go after forward, and by the time conv1's large gradients come
// the later layers' activations are gone.
#include <algorithm>
#include <map>

#include "core/storage.h"
#include "graph/op_schema.h"
#include "placement/place_passes.h"

namespace tandem::placement_detail {
namespace {

/// Bytes alive over [from, to] (inclusive) on a timeline of `end + 1` moments.
class Timeline {
 public:
  explicit Timeline(int end) : activations_(end + 2, 0), gradients_(end + 2, 0) {}
  void activation(size_t bytes, int from, int to) { add(activations_, bytes, from, to); }
  void gradient(size_t bytes, int from, int to) { add(gradients_, bytes, from, to); }
  /// The moment with the most bytes alive, split into activations and gradients.
  CpuTrainingLiveBytes peak() const {
    CpuTrainingLiveBytes best;
    int64_t activations = 0, gradients = 0;
    for (size_t t = 0; t + 1 < activations_.size(); ++t) {
      activations += activations_[t];
      gradients += gradients_[t];
      if (static_cast<size_t>(activations + gradients) > best.activations + best.gradients)
        best = {static_cast<size_t>(activations), static_cast<size_t>(gradients)};
    }
    return best;
  }

 private:
  static void add(std::vector<int64_t>& delta, size_t bytes, int from, int to) {
    delta[from] += static_cast<int64_t>(bytes);
    delta[to + 1] -= static_cast<int64_t>(bytes);
  }
  std::vector<int64_t> activations_, gradients_;
};

}  // namespace

CpuTrainingLiveBytes cpu_training_live_bytes(const PlaceContext& ctx) {
  const Graph& g = ctx.graph;
  const Plan& plan = ctx.plan;
  const Device cpu = Device::cpu();
  const int n = static_cast<int>(plan.steps.size());
  const int end = 2 * n + 1;  // after the last backward: the caller still holds its tensors
  auto backward_time = [n](int step) { return 2 * n - step; };
  auto bytes_of = [&](int value) { return allocation_bytes(ctx.value_bytes[value]); };

  std::vector<int> step_of(g.nodes.size(), -1);
  for (int i = 0; i < n; ++i) step_of[plan.steps[i].node] = i;
  auto producer_step = [&](int value) {
    const int producer = g.values[value].producer;
    return producer >= 0 ? step_of[producer] : -1;
  };
  auto is_view = [&](int step) { return g.nodes[plan.steps[step].node].schema->is_view; };
  // a view's storage is its input's (on the device both are on)
  std::vector<int> root(g.values.size());
  for (size_t v = 0; v < root.size(); ++v) root[v] = static_cast<int>(v);
  for (int i = 0; i < n; ++i)
    if (is_view(i)) {
      const Node& node = g.nodes[plan.steps[i].node];
      root[node.output] = root[node.inputs.at(0)];
    }

  // Forward: each cpu value's storage, from the step that makes it to when it goes.
  std::vector<int> made(g.values.size(), -1), gone(g.values.size(), -1);
  auto keep = [&](int value, int until) { gone[root[value]] = std::max(gone[root[value]], until); };
  for (const GraphInput& in : g.inputs) made[in.value] = 0, keep(in.value, end);
  for (const GraphInput& t : g.targets) made[t.value] = 0, keep(t.value, end);
  for (const GraphOutput& out : g.outputs) keep(out.value, end);
  // a copy that brings a value to the cpu makes it there; a copy that takes one away reads it
  std::vector<int> first_cpu_reader(g.values.size(), n);
  for (int i = 0; i < n; ++i)
    if (plan.steps[i].device == cpu)
      for (int in : g.nodes[plan.steps[i].node].inputs) first_cpu_reader[in] = std::min(first_cpu_reader[in], i);
  for (const CopyStep& c : plan.copies) {
    if (!c.forward) continue;
    if (c.to == cpu) made[c.value] = made[c.value] < 0 ? c.before_step : std::min(made[c.value], c.before_step);
    if (c.from == cpu) keep(c.value, std::min(c.before_step, n));
  }
  for (int i = 0; i < n; ++i) {
    const OpStep& s = plan.steps[i];
    if (s.device != cpu) continue;
    const Node& node = g.nodes[s.node];
    if (!is_view(i)) made[node.output] = i;
    keep(node.output, i);
    const std::vector<bool> reads =
        ctx.policy.backward_reads && !is_view(i) ? ctx.policy.backward_reads(cpu, g, node, ctx.bindings)
                                                 : std::vector<bool>{};
    auto read_in_backward = [&](size_t k) { return !is_view(i) && (reads.empty() || reads.at(k)); };
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const int in = node.inputs[k];
      keep(in, i);
      // kept: its slot goes with its producer's backward (a value copied in: with the
      // backward of its first reader here, when its gradient goes back)
      const int producer = producer_step(in);
      if (read_in_backward(k))
        keep(in, producer >= 0 && plan.steps[producer].device == cpu ? backward_time(producer)
                                                                     : backward_time(first_cpu_reader[in]));
    }
    if (read_in_backward(node.inputs.size())) keep(node.output, backward_time(i));
  }
  Timeline timeline(end);
  for (size_t v = 0; v < g.values.size(); ++v)
    if (root[v] == static_cast<int>(v) && made[v] >= 0 && gone[v] >= 0)
      timeline.activation(bytes_of(static_cast<int>(v)), made[v], std::max(gone[v], made[v]));

  // Backward: each gradient on the cpu, from its first contribution to its producer's
  // backward (a value copied in: to the backward of its first reader here, when it goes
  // back). A view passes its gradient through as the same storage.
  std::map<int, std::vector<int>> contributions;  // root value -> times
  for (int i = 0; i < n; ++i) {
    const OpStep& s = plan.steps[i];
    if (s.device != cpu || is_view(i)) continue;
    for (int in : g.nodes[s.node].inputs)
      if (ctx.needs_grad[in]) contributions[root[in]].push_back(backward_time(i));
  }
  for (const CopyStep& c : plan.copies)
    if (!c.forward && c.to == cpu && ctx.needs_grad[c.value])
      contributions[root[c.value]].push_back(backward_time(c.before_step));
  if (g.loss && ctx.needs_grad[g.loss->input]) {
    const int producer = producer_step(g.loss->input);
    if (producer >= 0 && plan.steps[producer].device == cpu) contributions[root[g.loss->input]].push_back(n);
  }
  for (auto& [value, times] : contributions) {
    std::sort(times.begin(), times.end());
    const int producer = producer_step(value);
    const int until = producer >= 0 && plan.steps[producer].device == cpu ? backward_time(producer)
                                                                           : backward_time(first_cpu_reader[value]);
    timeline.gradient(bytes_of(value), times.front(), std::max(until, times.front()));
    for (size_t k = 1; k < times.size(); ++k) timeline.gradient(bytes_of(value), times[k], times[k]);
  }
  return timeline.peak();
}

}  // namespace tandem::placement_detail
