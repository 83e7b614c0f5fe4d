// A plan drawn as Graphviz: one cluster and one fill colour per device, layers in graph
// order, copies as dashed red edges labelled with their bytes per batch. A training plan
// also shows the loss (an octagon on the device it runs on), the targets (on the cpu) and
// the backward copies of gradients (dashed blue edges, back to where the value was made).
#pragma once

#include <string>

#include "graph/graph.h"
#include "placement/plan.h"

namespace tandem {

/// The plan of `graph` as a `digraph` in the DOT language.
std::string plan_to_dot(const Graph& graph, const Plan& plan);

}  // namespace tandem
