// sum, mean, amax and amin over dimensions (torch.sum, torch.mean, torch.amax, torch.amin
// with `dim` and `keepdim`): which dimensions a layer reduces, shared by the schemas
// (reduce.cpp) and the backends' kernels so that the two cannot disagree.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/attributes.h"

namespace tandem {

/// Per dimension of an input of rank `rank`, whether the layer reduces it: `dim` null (or
/// an empty list, as torch.sum(x, dim=[])) reduces them all; negative dims count from the
/// end. Throws SchemaError on a dim out of range or given twice.
std::vector<bool> reduced_dims(const Attributes& a, int64_t rank);

}  // namespace tandem
