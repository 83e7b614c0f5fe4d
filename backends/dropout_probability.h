// The dropout probability of a layer's attributes, checked the same way by every backend.
#pragma once

#include <string>

#include "core/error.h"
#include "graph/attributes.h"

namespace tandem {

/// Attribute `p` as a float; UserError when it is not in [0, 1].
inline float dropout_probability(const Attributes& attrs) {
  const double p = attrs.get_float("p");
  if (!(p >= 0.0 && p <= 1.0)) throw UserError("dropout: p " + std::to_string(p) + " is not in [0, 1]");
  return static_cast<float>(p);
}

}  // namespace tandem
