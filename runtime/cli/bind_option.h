// --bind NAME=VALUE, shared by `tandem plan`, `run` and `train`: the value of a symbol of
// the model's input shapes other than the batch (`seq`, `tags`).
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/symbolic.h"

namespace tandem::cli {

/// The bindings `items` give: each NAME=VALUE with NAME a symbol of `graph`'s inputs or
/// targets and VALUE a whole number of at least 1. UserError otherwise, saying what to
/// write and which symbols the model has.
Bindings parse_bind_options(const std::vector<std::string>& items, const Graph& graph);

}  // namespace tandem::cli
