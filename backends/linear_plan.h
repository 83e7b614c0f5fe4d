// linear's shapes, shared by the CPU and CUDA kernels: x [*, K], weight [N, K], bias [N]
// (if bias=true) -> y [*, N], with x viewed as [M, K]. The loader has checked them against
// the layer's attributes; what is left are the runtime's own invariants.
#pragma once

#include <cstdint>

#include "backends/kernel.h"

namespace tandem {

struct LinearPlan {
  int64_t m = 0, n = 0, k = 0;
  bool has_bias = true;
};

LinearPlan plan_linear(const KernelSpec& spec);

}  // namespace tandem
