// Inference regions: runs of consecutive layers on one device that its backend computes
// as one kernel (backends/region_spec.h), so that a convolution takes the batch norm, the
// activation and the residual add after it, and the tensors between them stay in the
// backend's own layout. Inference only: a region keeps nothing for a backward, and the
// layers inside it have no tensors of their own for a forward hook to see.
//
// A region is closed: every tensor made inside it but the last layer's output is read by
// its layers alone (not by a copy, a view, a layer outside, nor the model's outputs).
// Data-parallel replicas are never fused: their tasks run side by side in groups.
#pragma once

#include <vector>

#include "backends/region_spec.h"
#include "graph/graph.h"
#include "runtime/exec/schedule.h"

namespace tandem {

/// Actions first..last (inclusive) of a schedule, computed by one kernel at `last`.
struct InferenceRegion {
  int first = 0;
  int last = 0;
};

/// The regions of `actions` (op actions in plan order, before their kernels are made): the
/// longest closed runs of two or more layers on one device whose backend calls each of
/// them fusable, each taken greedily from the front.
std::vector<InferenceRegion> find_inference_regions(const Graph& graph, const std::vector<Shape>& shapes,
                                                    const std::vector<ScheduleAction>& actions,
                                                    const PlanDevices& devices, size_t slot_count);

/// What the backend is asked to make for `region`: its layers' specs, how they read each
/// other, and the region's inputs (the slots `region_inputs` receives, in order).
RegionSpec inference_region_spec(const Graph& graph, const std::vector<Shape>& shapes,
                                 const std::vector<ScheduleAction>& actions, const InferenceRegion& region,
                                 std::vector<int>& region_inputs);

}  // namespace tandem
