#include "backends/reduce_geometry.h"

namespace tandem {

ReduceGeometry reduce_geometry(const Shape& x_shape, const std::vector<bool>& reduced) {
  ReduceGeometry g;
  std::vector<bool> merged_reduced;
  for (size_t d = 0; d < x_shape.size(); ++d) {
    g.x_numel *= x_shape[d];
    g.y_keepdim.push_back(reduced[d] ? 1 : x_shape[d]);
    if (reduced[d]) g.count *= x_shape[d];
    else g.y_numel *= x_shape[d];
    if (x_shape[d] == 1) continue;  // a dimension of 1 moves nothing either way
    if (!g.sizes.empty() && merged_reduced.back() == reduced[d]) {
      g.sizes.back() *= x_shape[d];
    } else {
      g.sizes.push_back(x_shape[d]);
      merged_reduced.push_back(reduced[d]);
    }
  }
  if (g.sizes.empty()) {  // a scalar, or only dimensions of 1
    g.sizes.push_back(1);
    merged_reduced.push_back(false);
  }
  g.y_strides.assign(g.sizes.size(), 0);
  int64_t stride = 1;
  for (size_t d = g.sizes.size(); d-- > 0;) {
    if (merged_reduced[d]) continue;
    g.y_strides[d] = stride;
    stride *= g.sizes[d];
  }
  return g;
}

}  // namespace tandem
