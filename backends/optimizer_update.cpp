// Note [matching torch bit for bit]: torch's CPU kernels compute `a.add_(b, alpha=s)` as
// fma(b, s, a) (its vectorised and scalar loops are both contracted), with the python
// float scalars rounded to float32. We write those fmas explicitly and switch off the
// compiler's own contraction, which could fuse other pairs than torch does. Compiled with
// -fno-math-errno (CMakeLists.txt), so that Adam's sqrt vectorises, as in torch's build.
#pragma GCC optimize("fp-contract=off")

#include "backends/optimizer_update.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace tandem {
namespace {

/// p, g, buf: n elements. The flags are template arguments so that the loop has no
/// branches and vectorises. kFirst: the buffer holds no history and becomes a copy of d_p.
template <bool kWeightDecay, bool kMomentum, bool kNesterov, bool kFirst>
void sgd_loop(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t n,
              const optim_detail::SgdScalars s) {
  for (int64_t i = 0; i < n; ++i) {
    float d_p = g[i];
    if constexpr (kWeightDecay) d_p = std::fma(p[i], s.weight_decay, d_p);  // d_p.add(p, alpha=wd)
    if constexpr (kMomentum) {
      // buf = clone(d_p), or buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
      float b = kFirst ? d_p : std::fma(d_p, s.one_minus_dampening, buf[i] * s.momentum);
      buf[i] = b;
      d_p = kNesterov ? std::fma(b, s.momentum, d_p) : b;  // d_p.add(buf, alpha=momentum)
    }
    p[i] = std::fma(d_p, s.neg_lr, p[i]);  // p.add_(d_p, alpha=-lr)
  }
}

/// Calls f(std::bool_constant<b>{}).
template <class F>
void with_bool(bool b, F&& f) {
  if (b)
    f(std::true_type{});
  else
    f(std::false_type{});
}

/// p, g, m (exp_avg), v (exp_avg_sq): n elements each. The weight decay is a template
/// argument so that the loop has no branches and vectorises.
template <bool kL2, bool kDecoupled>
void adam_loop(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
               int64_t n, const optim_detail::AdamScalars s) {
  for (int64_t i = 0; i < n; ++i) {
    float grad = g[i];
    if constexpr (kL2) grad = std::fma(p[i], s.l2, grad);  // grad.add(p, alpha=weight_decay)
    float param = p[i];
    if constexpr (kDecoupled) param = param * s.decay;      // p.mul_(1 - lr * weight_decay)
    // m.mul_(b1).add_(g, alpha=1-b1)
    float exp_avg = std::fma(grad, s.one_minus_beta1, m[i] * s.beta1);
    // v.mul_(b2).addcmul_(g, g, value=1-b2)
    float exp_avg_sq = std::fma(s.one_minus_beta2 * grad, grad, v[i] * s.beta2);
    m[i] = exp_avg;
    v[i] = exp_avg_sq;
    float denom = std::sqrt(exp_avg_sq) / s.bias_correction2_sqrt + s.eps;
    p[i] = param + s.neg_step_size * exp_avg / denom;  // p.addcdiv_(m, denom, value=-step_size)
  }
}

}  // namespace

void sgd_update_host(const optim_detail::SgdScalars& s, float* p, const float* g, float* buf, int64_t n, bool first) {
  with_bool(s.has_weight_decay, [&](auto decay) {
    with_bool(s.has_momentum, [&](auto momentum) {
      with_bool(s.nesterov, [&](auto nesterov) {
        with_bool(first, [&](auto first_step) {
          sgd_loop<decay(), momentum(), nesterov(), first_step()>(p, g, buf, n, s);
        });
      });
    });
  });
}

void adam_update_host(const optim_detail::AdamScalars& s, float* p, const float* g, float* m, float* v, int64_t n) {
  if (s.l2 != 0)
    adam_loop<true, false>(p, g, m, v, n, s);
  else if (s.decay != 1)
    adam_loop<false, true>(p, g, m, v, n, s);
  else
    adam_loop<false, false>(p, g, m, v, n, s);
}

double block_sum_of_squares_host(const float* x, int64_t n, int64_t b) {
  int64_t end = std::min(n, (b + 1) * kNormBlock);
  double lanes[8] = {};
  int64_t i = b * kNormBlock;
  for (; i + 8 <= end; i += 8)
    for (int j = 0; j < 8; ++j) lanes[j] += static_cast<double>(x[i + j]) * static_cast<double>(x[i + j]);
  for (; i < end; ++i) lanes[0] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  double s = 0;
  for (double lane : lanes) s += lane;
  return s;
}

double sum_of_squares_host(const float* x, int64_t n) {
  double total = 0;
  for (int64_t b = 0; b * kNormBlock < n; ++b) total += block_sum_of_squares_host(x, n, b);
  return total;
}

void scale_host(float* x, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

}  // namespace tandem
