// Fuzz target: a model file. load_graph_from_string either gives a Graph or refuses with a
// ModelError at FILE:LINE:COLUMN; a loaded graph is then placed on a cpu and two small GPUs
// by the balanced policy, which either plans or refuses with a UserError.
#include <string>

#include "fuzz_target.h"
#include "graph/load_graph.h"
#include "placement/place.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tandem::Graph graph;
  try {
    graph = tandem::load_graph_from_string(text, "fuzz.yaml");
  } catch (const tandem::ModelError& e) {
    tandem::fuzz::require_prefix(e.what(), "fuzz.yaml");
    return 0;
  }
  tandem::DeviceInventory inventory;
  inventory.devices.push_back({tandem::Device::cuda(0), 1 << 20, true, "simulated GPU"});
  inventory.devices.push_back({tandem::Device::cuda(1), 1 << 20, true, "simulated GPU"});
  for (bool training : {false, true}) {
    tandem::PlacementPolicy policy;
    policy.name = "balanced";
    policy.training = training;
    policy.batch = 4;
    try {
      tandem::place(graph, inventory, policy);
    } catch (const tandem::UserError&) {
    }
  }
  return 0;
}
