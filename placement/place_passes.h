// Private to placement/: the state the passes of place() share, and the passes
// themselves, each its own function (place.h lists them).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "placement/place.h"

namespace tandem::placement_detail {

/// One layer's decision while the passes run.
struct Decision {
  std::optional<Device> device;
  std::string reason;
  std::string source;  // for errors: "--place enc.*=cuda:3", "device: on block 'enc'"
  bool pinned = false; // decided by pass 1
};

struct PlaceContext {
  const Graph& graph;
  const DeviceInventory& inventory;
  const PlacementPolicy& policy;
  Bindings bindings;                  // batch and the others, unbound ones at 1
  std::vector<size_t> value_bytes;    // per value, under `bindings`
  std::vector<size_t> param_bytes;    // per node, float32
  std::vector<size_t> param_pool_bytes;  // per node, as a device's pool counts them (core/storage.h)
  std::vector<bool> needs_grad;       // per value: training propagates a gradient through it
  double optimizer_factor = 2;        // optimizer state per parameter byte
  std::vector<Decision> decisions;    // per node
  /// Bytes taken off a GPU's balancing budget: where a plan's estimate came out above the
  /// budget, place() plans again with that much less (see place()).
  std::map<Device, size_t> budget_cut;
  Plan plan;
};

PlaceContext make_context(const Graph& graph, const DeviceInventory& inventory, const PlacementPolicy& policy);
void pass1_explicit(PlaceContext& ctx);
void pass2_policy(PlaceContext& ctx);
void pass3_fallback(PlaceContext& ctx);
void pass4_partition(PlaceContext& ctx);
void pass5_estimate(PlaceContext& ctx);

/// The bytes a layer needs on its device while balancing, as the device's pool counts
/// them: parameters (with gradient and optimizer state in training) and its output. The
/// copies it receives are the balancer's to add (they depend on where its inputs are).
size_t layer_footprint(const PlaceContext& ctx, int node);
/// The cpu's activations and activation gradients at the moment of a training step when
/// they hold the most (cpu_training_memory.cpp).
struct CpuTrainingLiveBytes {
  size_t activations = 0;
  size_t gradients = 0;
};
CpuTrainingLiveBytes cpu_training_live_bytes(const PlaceContext& ctx);

/// "cpu, cuda:0, cuda:1"
std::string inventory_list(const DeviceInventory& inventory);

}  // namespace tandem::placement_detail
