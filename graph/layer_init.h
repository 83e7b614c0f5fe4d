// A leaf layer's `init:` key: torch.nn.init's uniform_, normal_, zeros_ and ones_ for some of
// its parameters, in place of the distribution torch's module draws them from. Why: torch's
// nn.Embedding starts at N(0, 1), right for a word table feeding a layer norm but not for a
// recommender, whose millions of rarely seen rows stay near their start: DLRM draws them
// from U(-sqrt(1/rows), sqrt(1/rows)), so that a row never trained contributes almost
// nothing (configs/dlrm.yaml). Private to graph/.
#pragma once

#include <vector>

#include "graph/yaml_reader.h"

namespace tandem {

/// Reads `init` ({weight: {uniform: [a, b]}, bias: zeros, ...}) of the leaf at `layer` and
/// sets the init of those of `params` (full names: "<layer>.weight"). Like torch's in-place
/// init after construction, it replaces the whole tensor (an embedding's padding_idx row
/// too). ModelError for an unknown parameter, a bad distribution, or an int64 buffer.
void read_layer_init(const YamlReader& yaml, const YAML::Node& init, const std::string& layer,
                     std::vector<ParamSpec>& params);

}  // namespace tandem
