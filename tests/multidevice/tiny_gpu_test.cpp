// The balanced policy on simulated GPUs too small for the whole model: whatever it plans
// runs, and each GPU's pool never holds more than the plan predicted (placement/estimate.cpp
// bounds what the host may have submitted ahead of a GPU's queue). Before, the balancer
// charged each layer its output alone and planned more onto a 64 KiB GPU than fits: the
// run failed out of memory.
#include <catch2/catch.hpp>

#include <string>

#include "graph/load_graph.h"
#include "multidevice_support.h"
#include "runtime/model.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

constexpr const char* kChain = R"(name: chain
inputs:
  x: {shape: [batch, 24]}
targets:
  y: {shape: [batch], dtype: int64}
layers:
  - {name: fc0, op: linear, in_features: 24, out_features: 40}
  - {name: act0, op: relu}
  - {name: fc1, op: linear, in_features: 40, out_features: 40}
  - {name: act1, op: tanh}
  - {name: fc2, op: linear, in_features: 40, out_features: 40}
  - {name: act2, op: relu}
  - {name: fc3, op: linear, in_features: 40, out_features: 10}
loss: {op: cross_entropy, input: fc3, target: y}
)";

/// The GPUs the plan put layers on, and checks each one's measured peak against the
/// plan's estimate and the estimate against the capacity.
int check_within_estimate(const Model& model, size_t capacity) {
  int used = 0;
  for (const DeviceReport& r : model.device_report()) {
    if (r.device.kind != DeviceKind::cuda) continue;
    size_t predicted = 0;
    for (const DeviceEstimate& e : model.last_plan().estimates)
      if (e.device == r.device) predicted = e.peak_bytes;
    INFO(r.device.str() << ": measured peak " << r.peak_bytes << ", predicted " << predicted);
    CHECK(r.peak_bytes <= predicted);
    CHECK(predicted <= capacity);
    used += r.peak_bytes > 0;
  }
  return used;
}

}  // namespace

TEST_CASE("balanced on tiny simulated GPUs plans only what fits, and the run stays within the estimate",
          "[multidevice][placement][memory]") {
  const Graph graph = load_graph_from_string(kChain, "chain.yaml");
  Model reference(graph);
  reference.init_parameters(5);
  const TensorMap inputs = reference.random_inputs({{"batch", 16}}, 9);
  const TensorMap expected = reference.forward(inputs);
  int runs_on_gpus = 0;
  // From less than one layer's parameters to room for the whole model on one GPU.
  for (size_t capacity : {size_t{512}, size_t{3000}, size_t{6000}, size_t{9000}, size_t{12000}, size_t{16384},
                          size_t{24000}, size_t{65536}}) {
    INFO("capacity " << capacity << " bytes per GPU");
    Model model(graph);
    model.init_parameters(5);
    model.use_devices(sim_gpus(2, capacity), policy("balanced"));
    TensorMap out;
    REQUIRE_NOTHROW(out = model.forward(inputs));
    CHECK(max_relative_error(out, expected) < 1e-5);
    runs_on_gpus += check_within_estimate(model, capacity) > 0;
  }
  CHECK(runs_on_gpus >= 5);  // most capacities put layers on the GPUs: the bound is not everything to the cpu
}

TEST_CASE("balanced training on tiny simulated GPUs runs what it plans", "[multidevice][placement][memory]") {
  const Graph graph = load_graph_from_string(kChain, "chain.yaml");
  Model probe(graph);
  TensorMap batch = probe.random_inputs({{"batch", 16}}, 9);
  batch.merge(probe.random_targets({{"batch", 16}}, 9));
  for (size_t capacity : {size_t{2048}, size_t{8192}, size_t{20000}, size_t{40000}, size_t{90000}}) {
    INFO("capacity " << capacity << " bytes per GPU");
    Model model(graph);
    model.init_parameters(5);
    PlacementPolicy training = policy("balanced");
    training.training = true;
    model.use_devices(sim_gpus(2, capacity), training);
    REQUIRE_NOTHROW(model.loss_and_backward(batch, 1));
    REQUIRE_NOTHROW(model.loss_and_backward(batch, 2));
    for (const DeviceEstimate& e : model.last_plan().estimates)
      if (e.device.kind == DeviceKind::cuda) CHECK(e.peak_bytes <= capacity);
  }
}
