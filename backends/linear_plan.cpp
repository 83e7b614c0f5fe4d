#include "backends/linear_plan.h"

#include <span>

#include "core/error.h"

namespace tandem {

LinearPlan plan_linear(const KernelSpec& spec) {
  const Shape& x = spec.inputs.at(0).shape;
  TANDEM_ASSERT(!x.empty(), "linear: input must have rank >= 1");
  LinearPlan p;
  p.has_bias = spec.attrs->get_bool("bias");
  TANDEM_ASSERT(spec.params.size() == (p.has_bias ? 2u : 1u), "linear: wrong parameter count");
  p.k = x.back();
  p.n = spec.params[0].shape.at(0);
  TANDEM_ASSERT(spec.params[0].shape.at(1) == p.k, "linear: weight does not match input features");
  p.m = shape_numel(std::span(x).first(x.size() - 1));
  return p;
}

}  // namespace tandem
