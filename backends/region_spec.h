// RegionSpec: a run of inference layers that a backend may compute as one kernel, so that
// the tensors between them never leave its own layouts (oneDNN's channels-last, say) and
// a convolution takes the batch norm, activation and residual add after it as part of
// itself (torch.jit.freeze and oneDNN's post-ops do the same). The runtime offers a region
// only in inference, only where no one outside it reads a tensor inside it, and only of
// layers the backend called fusable (Backend::fusable); runtime/exec/fusion.h finds them.
#pragma once

#include <cstddef>
#include <vector>

#include "backends/kernel.h"

namespace tandem {

struct RegionNode {
  KernelSpec spec;  // the layer's own spec: its op, attributes, shapes and precision
  /// Per input of the layer: >= 0, the region's input of that index; < 0, the output of
  /// node ~k (k = ~value) of this region, an earlier one.
  std::vector<int> inputs;
  size_t first_param = 0;  // where its parameters start in the region kernel's params
};

/// The region kernel's forward takes the region's inputs (KernelArgs::inputs, in the order
/// of `inputs`), every node's parameters one node after another, and writes one output:
/// the last node's. It has no backward: regions are made for inference only.
struct RegionSpec {
  std::vector<RegionNode> nodes;  // in the order they run
  std::vector<TensorDesc> inputs;
};

}  // namespace tandem
