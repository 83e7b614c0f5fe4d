// The dropout probability of a layer's attributes, and how many elements share a draw,
// the same way in every backend.
#pragma once

#include <algorithm>
#include <string>

#include "backends/kernel.h"
#include "core/error.h"
#include "graph/attributes.h"

namespace tandem {

/// Attribute `p` as a float; UserError when it is not in [0, 1].
inline float dropout_probability(const Attributes& attrs) {
  const double p = attrs.get_float("p");
  if (!(p >= 0.0 && p <= 1.0)) throw UserError("dropout: p " + std::to_string(p) + " is not in [0, 1]");
  return static_cast<float>(p);
}

/// How many consecutive elements share one draw of the mask: 1 for dropout; for
/// stochastic_depth a sample's (mode row) or the whole input's (mode batch).
inline int64_t dropout_group(const KernelSpec& spec) {
  if (spec.op != "stochastic_depth") return 1;
  const Shape& x = spec.inputs.at(0).shape;
  const int64_t n = shape_numel(x);
  if (spec.attrs->get_string("mode") == "batch" || x.empty()) return std::max<int64_t>(n, 1);
  return x[0] > 0 ? std::max<int64_t>(n / x[0], 1) : 1;
}

}  // namespace tandem
