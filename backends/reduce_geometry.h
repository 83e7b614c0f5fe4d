// Where each element of a reduction's input goes in its output: the input's dimensions,
// adjacent reduced (or kept) ones merged, with the output's stride along each (0 along a
// reduced one). Shared by the backends' sum, mean, amax and amin kernels
// (graph/ops/reduce.h), whose backward sends each input element its output element's
// gradient.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tandem {

struct ReduceGeometry {
  std::vector<int64_t> sizes;      // the input's dimensions, merged; at least one
  std::vector<int64_t> y_strides;  // the output's stride along each (0: reduced)
  int64_t count = 1;               // input elements per output element
  int64_t x_numel = 1, y_numel = 1;
  /// The output's shape with each reduced dimension kept as 1 (keepdim's).
  Shape y_keepdim;
};

/// The geometry of reducing `x_shape` over the dimensions `reduced` marks.
ReduceGeometry reduce_geometry(const Shape& x_shape, const std::vector<bool>& reduced);

/// Calls f(i, p) for the input elements i in [begin, end), p the output element i goes to.
template <class F>
void for_each_reduced(const ReduceGeometry& g, int64_t begin, int64_t end, F&& f) {
  if (begin >= end) return;
  const size_t rank = g.sizes.size();
  std::vector<int64_t> index(rank);
  int64_t rest = begin, p = 0;
  for (size_t d = rank; d-- > 0;) {
    index[d] = rest % g.sizes[d];
    rest /= g.sizes[d];
    p += index[d] * g.y_strides[d];
  }
  const int64_t inner = g.sizes[rank - 1], inner_stride = g.y_strides[rank - 1];
  for (int64_t i = begin; i < end;) {
    // a run along the innermost dimension
    const int64_t run = std::min(end - i, inner - index[rank - 1]);
    for (int64_t k = 0; k < run; ++k) f(i + k, p + k * inner_stride);
    i += run;
    p += run * inner_stride;
    index[rank - 1] += run;
    for (size_t d = rank - 1; d > 0 && index[d] == g.sizes[d]; --d) {  // carry
      p -= index[d] * g.y_strides[d];
      index[d] = 0;
      ++index[d - 1];
      p += g.y_strides[d - 1];
    }
  }
}

}  // namespace tandem
