// The scalars of one SGD or Adam(W) update, computed as torch computes them from python
// floats (in double, then rounded to float32 where torch hands them to a float32 kernel).
// Shared by the CPU loops (sgd.cpp, adam.cpp) and the CUDA backend's fused updates
// (backends/cuda/kernels/optimizer.cu), so that both apply the same numbers.
//
// Compiled without floating-point contraction wherever it is included (see Note
// [matching torch bit for bit] in optimizer_update.cpp): `1 - lr * weight_decay` fused
// into one fma would round differently from torch, and these inline functions must be
// the same in every file that uses them.
#pragma once

#include <cmath>
#include <cstdint>

#include "graph/training_spec.h"

// (nvcc's front end does not know the pragmas; the device code that includes this only
// reads the structs, never calls the functions. clang, which builds the sanitizer jobs,
// ignores gcc's and takes its own.)
#if defined(__clang__)
#pragma float_control(push)
#pragma clang fp contract(off)
#elif !defined(__CUDACC__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

namespace tandem::optim_detail {

struct SgdScalars {
  bool has_weight_decay, has_momentum, nesterov;  // decided in double, as torch does
  float weight_decay;
  float momentum;
  float one_minus_dampening;
  float neg_lr;
};

inline SgdScalars sgd_scalars(const OptimizerConfig& c, double lr) {
  return {c.weight_decay != 0,
          c.momentum != 0,
          c.nesterov,
          static_cast<float>(c.weight_decay),
          static_cast<float>(c.momentum),
          static_cast<float>(1 - c.dampening),
          static_cast<float>(-lr)};
}

struct AdamScalars {
  float l2;              // adam: grad.add(p, alpha=weight_decay); 0: none
  float decay;           // adamw: p.mul_(1 - lr * weight_decay); 1: none
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float bias_correction2_sqrt;
  float eps;
  float neg_step_size;   // -lr / (1 - beta1^step)
};

/// The scalars of update number `step` (from 1).
inline AdamScalars adam_scalars(const OptimizerConfig& c, bool decoupled, double lr, int64_t step) {
  double bias_correction1 = 1 - std::pow(c.beta1, static_cast<double>(step));
  double bias_correction2 = 1 - std::pow(c.beta2, static_cast<double>(step));
  double step_size = lr / bias_correction1;
  AdamScalars s;
  s.l2 = decoupled ? 0.0f : static_cast<float>(c.weight_decay);
  s.decay = decoupled ? static_cast<float>(1 - lr * c.weight_decay) : 1.0f;
  s.beta1 = static_cast<float>(c.beta1);
  s.one_minus_beta1 = static_cast<float>(1 - c.beta1);
  s.beta2 = static_cast<float>(c.beta2);
  s.one_minus_beta2 = static_cast<float>(1 - c.beta2);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(c.eps);
  s.neg_step_size = static_cast<float>(-step_size);
  return s;
}

}  // namespace tandem::optim_detail

#if defined(__clang__)
#pragma float_control(pop)
#elif !defined(__CUDACC__)
#pragma GCC pop_options
#endif
