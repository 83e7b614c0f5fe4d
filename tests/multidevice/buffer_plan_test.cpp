// Inference lays its intermediates out in reused buffers on every device, the GPUs' as the
// cpu's (runtime/exec/buffer_plan.h): a buffer only for a tensor whose writer and readers
// all run on its device's compute lane.
#include <catch2/catch.hpp>

#include <set>

#include "graph/load_graph.h"
#include "placement/place.h"
#include "runtime/devices/device_registry.h"
#include "runtime/exec/buffer_plan.h"
#include "runtime/exec/node_kernels.h"
#include "runtime/exec/schedule.h"
#include "runtime/model.h"

using namespace tandem;

namespace {

// six layers on cuda:0, then two on the cpu
const char* chain_yaml = R"(name: chain
inputs:
  x: {shape: [batch, 32]}
layers:
  - name: gpu
    device: "cuda:0"
    layers:
      - {name: fc1, op: linear, in_features: 32, out_features: 32}
      - {name: a1, op: relu}
      - {name: fc2, op: linear, in_features: 32, out_features: 32}
      - {name: a2, op: relu}
      - {name: fc3, op: linear, in_features: 32, out_features: 32}
      - {name: a3, op: relu}
  - {name: fc4, op: linear, in_features: 32, out_features: 32, device: cpu}
  - {name: fc5, op: linear, in_features: 32, out_features: 8, device: cpu}
outputs: [fc5]
)";

}  // namespace

TEST_CASE("inference reuses buffers on a GPU as on the cpu, and none for what crosses devices",
          "[multidevice][memory]") {
  const Graph graph = load_graph_from_string(chain_yaml, "chain.yaml");
  DeviceRegistry registry(DeviceOptions{.sim_gpus = 1});
  PlacementPolicy policy;
  policy.batch = 4;
  policy.bindings = {{"batch", 4}};
  const Plan plan = place(graph, registry.inventory(), policy);
  const std::vector<Shape> shapes = concrete_shapes(graph, policy.bindings);
  Model weights(load_graph_from_string(chain_yaml, "chain.yaml"));
  const Schedule schedule(graph, plan, shapes, registry, /*trailing_copies=*/true,
                          [&](const ParamSpec& p, Device, const std::string&) { return weights.parameters().at(p.name); });
  std::vector<int> outputs;
  for (const GraphOutput& out : graph.outputs) outputs.push_back(schedule.find_slot(out.value, 0, "test"));
  const BufferPlan buffers = plan_buffers(graph, schedule, shapes, outputs);

  auto slot_of = [&](const std::string& layer, Device device) {
    for (const Node& node : graph.nodes)
      if (node.path == layer) {
        for (size_t d = 0; d < schedule.devices.size(); ++d)
          if (schedule.devices[d]->device == device) return schedule.find_slot(node.output, static_cast<int>(d), "test");
      }
    FAIL("no layer " << layer);
    return -1;
  };
  std::set<int> gpu_buffers, cpu_buffers;
  for (const char* layer : {"gpu.fc1", "gpu.a1", "gpu.fc2", "gpu.a2", "gpu.fc3"}) {
    const int b = buffers.buffer_of_slot[slot_of(layer, Device::cuda(0))];
    INFO(layer);
    REQUIRE(b >= 0);
    CHECK(schedule.devices[buffers.buffers[b].device]->device == Device::cuda(0));
    gpu_buffers.insert(b);
  }
  // a chain needs two buffers in turn: the input of a layer and its output
  CHECK(gpu_buffers.size() == 2);
  // gpu.a3 is copied down to the cpu: a copy lane reads it, so it is allocated at run time
  CHECK(buffers.buffer_of_slot[slot_of("gpu.a3", Device::cuda(0))] == -1);
  // fc4 on the cpu reuses host buffers; fc5 is the output and leaves the pass
  CHECK(buffers.buffer_of_slot[slot_of("fc4", Device::cpu())] >= 0);
  CHECK(buffers.buffer_of_slot[slot_of("fc5", Device::cpu())] == -1);
  for (const BufferPlan::Buffer& b : buffers.buffers) CHECK(b.bytes == 4 * 32 * sizeof(float));

  // and the placed model computes what the cpu alone does, run after run
  Model placed(load_graph_from_string(chain_yaml, "chain.yaml"));
  Model alone(load_graph_from_string(chain_yaml, "chain.yaml"));
  alone.to(Device::cpu());
  placed.use_devices(std::make_shared<DeviceRegistry>(DeviceOptions{.sim_gpus = 1}), PlacementPolicy{});
  for (uint64_t seed : {1, 2, 3}) {
    const TensorMap x = alone.random_inputs({{"batch", 4}}, seed);
    const Tensor a = alone.forward(x).at("fc5"), p = placed.forward(x).at("fc5");
    REQUIRE(a.shape() == p.shape());
    for (int64_t i = 0; i < a.numel(); ++i) CHECK(a.data<float>()[i] == p.data<float>()[i]);
  }
}
