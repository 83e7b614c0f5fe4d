// The top-level sections of a model file other than the layers: `train:` and
// `placement:` (the loss stays with the layers: it refers to their tensors). Private to graph/.
#pragma once

#include "graph/yaml_reader.h"

namespace tandem {

/// `train:`; `graph` (inputs and targets already read) checks data column names.
TrainingSpec read_training_section(const YamlReader& yaml, const YAML::Node& n, const Graph& graph);
/// `placement: balanced` or `placement: {policy: balanced, max_memory: 8GiB}`.
PlacementSpec read_placement_section(const YamlReader& yaml, const YAML::Node& n);

}  // namespace tandem
