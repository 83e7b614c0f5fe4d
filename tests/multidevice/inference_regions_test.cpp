// Inference regions (runtime/exec/inference_regions.h, backends/cpu/ops/fused_region.cpp):
// runs of convolutions, batch norms, activations, adds, muls and pools computed as one
// kernel give what the layers give one by one, on the cpu and on a simulated GPU, in fp32
// (within rounding: a batch norm folded into its convolution rounds differently) and
// never swallow a tensor someone outside reads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include <random>

#include "graph/load_graph.h"
#include "multidevice_support.h"
#include "placement/place.h"
#include "runtime/exec/node_kernels.h"
#include "runtime/exec/schedule.h"
#include "runtime/model.h"
#include "../unit/unit_test_support.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

// Every way a layer joins a region: a batch norm first (on the region's input), a
// convolution absorbing its batch norm, activations and a residual add over an operand
// computed before it (in place) or after it (a downsample branch, so the add runs as its
// own op), a grouped convolution (of 16-channel groups), squeeze-excitation's per-channel mul, both pools with
// ceil_mode and padding, a tensor read twice by later layers, and a model output in the
// middle (`mid`), which must stay out of any region.
const char* net_yaml = R"(name: net
inputs:
  x: {shape: [batch, 8, 13, 11]}
layers:
  - {name: bn0, op: batch_norm2d, num_features: 8}
  - {name: conv1, op: conv2d, in_channels: 8, out_channels: 32, kernel_size: 3, padding: 1}
  - {name: bn1, op: batch_norm2d, num_features: 32}
  - {name: act1, op: relu}
  - {name: conv2, op: conv2d, in_channels: 32, out_channels: 32, kernel_size: 3, padding: 1, groups: 2, bias: false}
  - {name: bn2, op: batch_norm2d, num_features: 32, affine: false}
  - {name: add2, op: add, inputs: [bn2, act1]}
  - {name: act2, op: hardswish}
  - {name: conv3, op: conv2d, in_channels: 32, out_channels: 32, kernel_size: 3, stride: 2, padding: 1, bias: false}
  - {name: bn3, op: batch_norm2d, num_features: 32}
  - {name: down, op: conv2d, inputs: act2, in_channels: 32, out_channels: 32, kernel_size: 1, stride: 2}
  - {name: add3, op: add, inputs: [bn3, down]}
  - {name: act3, op: relu6}
  - {name: se_pool, op: avg_pool2d, kernel_size: [7, 6]}
  - {name: se_fc1, op: conv2d, in_channels: 32, out_channels: 8, kernel_size: 1}
  - {name: se_act, op: silu}
  - {name: se_fc2, op: conv2d, in_channels: 8, out_channels: 32, kernel_size: 1}
  - {name: se_gate, op: hardsigmoid}
  - {name: se, op: mul, inputs: [act3, se_gate]}
  - {name: mid, op: gelu}
  - {name: pool, op: max_pool2d, kernel_size: 3, stride: 2, padding: 1, ceil_mode: true}
  - {name: conv4, op: conv2d, in_channels: 32, out_channels: 24, kernel_size: 1}
  - {name: act4, op: sigmoid}
  - {name: add4, op: add, inputs: [act4, act4]}
  - {name: avg, op: avg_pool2d, kernel_size: 2, padding: 1, ceil_mode: true, count_include_pad: false}
  - {name: flat, op: flatten}
  - {name: fc, op: linear, in_features: 216, out_features: 5}
outputs: [mid, fc]
)";

/// Every parameter drawn afresh: running variances in [0.5, 2], the rest normal, so that
/// a mean or variance read wrongly (or not folded) shows.
TensorMap drawn_parameters(const Model& model, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.f, 0.5f);
  std::uniform_real_distribution<float> variance(0.5f, 2.f);
  TensorMap drawn;
  for (const auto& [name, t] : model.parameters()) {
    Tensor copy = Tensor::empty(t.shape(), t.dtype());
    std::memcpy(copy.raw_data(), t.raw_data(), t.nbytes());
    if (t.dtype() == DType::float32)
      for (float& v : copy.span<float>()) v = name.ends_with("running_var") ? variance(rng) : normal(rng);
    drawn.emplace(name, std::move(copy));
  }
  return drawn;
}

Model net_with(const TensorMap& weights) {
  Model model(load_graph_from_string(net_yaml, "net.yaml"));
  model.set_weights(weights);
  return model;
}

/// max |a - b| over max |b|, across every tensor of both maps (same names and shapes): a
/// region folds a batch norm into its convolution's weights and adds in another order, so
/// an output near zero may differ from the layers' by more than 1e-5 of itself (1.1e-5 was
/// seen, one seed in 40) while the difference stays far below 1e-5 of the outputs' scale.
double error_to_scale(const TensorMap& a, const TensorMap& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, scale = 0;
  for (const auto& [name, t] : a) {
    const Tensor& u = b.at(name);
    REQUIRE(t.shape() == u.shape());
    const auto x = t.span<float>(), y = u.span<float>();
    for (size_t k = 0; k < x.size(); ++k) {
      diff = std::max(diff, std::abs(static_cast<double>(x[k]) - y[k]));
      scale = std::max(scale, std::abs(static_cast<double>(y[k])));
    }
  }
  REQUIRE(scale > 0);
  return diff / scale;
}

}  // namespace

TEST_CASE("inference regions give what the layers give one by one", "[multidevice][regions]") {
  auto rng = seeded_rng("inference regions");
  const TensorMap weights = drawn_parameters(Model(load_graph_from_string(net_yaml, "net.yaml")), rng);
  Model reference = net_with(weights);
  reference.set_inference_regions(false);
  Model fused = net_with(weights);
  REQUIRE(fused.inference_regions());
  Model placed = net_with(weights);
  placed.use_devices(sim_gpus(1), policy("balanced"));
  for (int64_t batch : {1, 3}) {
    const TensorMap x = reference.random_inputs({{"batch", batch}}, rng());
    const TensorMap want = reference.forward(x);
    REQUIRE(any_nonzero(want));
    INFO("batch " << batch);
    CHECK(error_to_scale(fused.forward(x), want) < 1e-5);
    CHECK(error_to_scale(placed.forward(x), want) < 1e-5);
    // a second pass reuses the folded weights and the buffers
    CHECK(error_to_scale(fused.forward(x), want) < 1e-5);
  }
}

TEST_CASE("regions fold weights again after the parameters change", "[multidevice][regions]") {
  auto rng = seeded_rng("regions refold");
  Model reference = net_with(drawn_parameters(Model(load_graph_from_string(net_yaml, "net.yaml")), rng));
  reference.set_inference_regions(false);
  Model fused = net_with(drawn_parameters(reference, rng));
  const TensorMap x = reference.random_inputs({{"batch", 2}}, rng());
  CHECK(max_relative_error(fused.forward(x), reference.forward(x)) > 1e-2);  // other weights: it judges
  // the reference's weights, set into the compiled model (as load_state_dict sets them)
  TensorMap now;
  for (const auto& [name, t] : reference.parameters()) now.emplace(name, t);
  fused.set_weights(now);
  CHECK(error_to_scale(fused.forward(x), reference.forward(x)) < 1e-5);
}

TEST_CASE("regions are closed, and a hook sees every layer", "[multidevice][regions]") {
  const Graph graph = load_graph_from_string(net_yaml, "net.yaml");
  DeviceRegistry registry(DeviceOptions{.sim_gpus = 0});
  PlacementPolicy policy;
  policy.batch = 2;
  policy.bindings = {{"batch", 2}};
  const Plan plan = place(graph, registry.inventory(), policy);
  const std::vector<Shape> shapes = concrete_shapes(graph, policy.bindings);
  const Model weights(load_graph_from_string(net_yaml, "net.yaml"));
  const Schedule schedule(graph, plan, shapes, registry, /*trailing_copies=*/true,
                          [&](const ParamSpec& p, Device, const std::string&) { return weights.parameters().at(p.name); },
                          /*regions=*/true);
  std::vector<std::string> region_ends;
  int fused_away = 0;
  for (const ScheduleAction& a : schedule.actions) {
    if (a.kind != ScheduleAction::Kind::op) continue;
    if (a.fused_away) ++fused_away;
    if (a.region_size > 1) region_ends.push_back(a.node->path);
  }
  // everything from bn0 to `mid` (a model output ends a region), then pool to avg;
  // flatten is a view and fc is not fusable
  CHECK(region_ends == std::vector<std::string>{"mid", "avg"});
  CHECK(fused_away == 19 + 4);

  // with a hook, every layer runs (and is seen) on its own
  Model model(load_graph_from_string(net_yaml, "net.yaml"));
  std::vector<std::string> seen;
  model.set_forward_hook([&](const LayerCall& call) { seen.push_back(call.node->path); });
  model.forward(model.random_inputs({{"batch", 2}}, 7));
  CHECK(seen.size() == graph.nodes.size());
}

// A convolution whose groups are not whole 16-channel blocks (4 channels here, as
// resnext50_32x4d's; regnet_y_400mf's 8) has no oneDNN kernel in a region's blocked layout
// but the reference one (regnet_y_400mf's forward took 4.3 s in regions, 25 ms without):
// it runs on its own, the layers around it still fused, and gives what it gave. So has a
// residual add after a convolution's activation (efficientnet_v2's): it runs as its own
// step of the region, not as the convolution's sum post-op.
TEST_CASE("a convolution of narrow groups stays out of regions, an add after an activation is its own step", "[multidevice][regions]") {
  const char* yaml = R"(name: narrow
inputs:
  x: {shape: [batch, 8, 9, 7]}
layers:
  - {name: conv1, op: conv2d, in_channels: 8, out_channels: 16, kernel_size: 1}
  - {name: act1, op: relu}
  - {name: conv2, op: conv2d, in_channels: 16, out_channels: 16, kernel_size: 3, padding: 1, groups: 4}
  - {name: bn2, op: batch_norm2d, num_features: 16}
  - {name: act2, op: relu}
  - {name: conv3, op: conv2d, in_channels: 16, out_channels: 16, kernel_size: 3, padding: 1}
  - {name: act3, op: silu}
  - {name: add3, op: add, inputs: [act3, act2]}
)";
  const Graph graph = load_graph_from_string(yaml, "narrow.yaml");
  DeviceRegistry registry(DeviceOptions{.sim_gpus = 0});
  PlacementPolicy policy;
  policy.batch = 2;
  policy.bindings = {{"batch", 2}};
  const Plan plan = place(graph, registry.inventory(), policy);
  const std::vector<Shape> shapes = concrete_shapes(graph, policy.bindings);
  const Model weights(load_graph_from_string(yaml, "narrow.yaml"));
  const Schedule schedule(graph, plan, shapes, registry, /*trailing_copies=*/true,
                          [&](const ParamSpec& p, Device, const std::string&) { return weights.parameters().at(p.name); },
                          /*regions=*/true);
  std::vector<std::string> region_ends;
  for (const ScheduleAction& a : schedule.actions)
    if (a.kind == ScheduleAction::Kind::op && a.region_size > 1) region_ends.push_back(a.node->path);
  CHECK(region_ends == std::vector<std::string>{"act1", "add3"});

  auto rng = seeded_rng("narrow groups");
  const TensorMap drawn = drawn_parameters(Model(load_graph_from_string(yaml, "narrow.yaml")), rng);
  Model reference(load_graph_from_string(yaml, "narrow.yaml"));
  reference.set_weights(drawn);
  reference.set_inference_regions(false);
  Model fused(load_graph_from_string(yaml, "narrow.yaml"));
  fused.set_weights(drawn);
  const TensorMap x = reference.random_inputs({{"batch", 2}}, rng());
  const TensorMap want = reference.forward(x);
  REQUIRE(any_nonzero(want));
  CHECK(error_to_scale(fused.forward(x), want) < 1e-5);
}
