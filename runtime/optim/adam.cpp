// Adam (L2 weight decay on the gradient) and AdamW (decoupled weight decay):
// torch.optim.Adam's and AdamW's single-tensor updates (torch 1.13, amsgrad off),
// operation for operation. See Note [matching torch bit for bit] in sgd.cpp.
#pragma GCC optimize("fp-contract=off")

#include <cmath>

#include "runtime/optim/optimizer_impl.h"
#include "backends/update_scalars.h"

namespace tandem::optim_detail {

namespace {

/// p, g, m (exp_avg), v (exp_avg_sq): n elements each. The weight decay is a template
/// argument so that the loop has no branches and vectorises.
template <bool kL2, bool kDecoupled>
void adam_loop(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
               int64_t n, const AdamScalars s) {
#pragma omp parallel for if (n > kParallelMinElements)
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
    // A vector sqrt because tandem_optim builds with -fno-math-errno (CMakeLists.txt).
    float denom = std::sqrt(exp_avg_sq) / s.bias_correction2_sqrt + s.eps;
    p[i] = param + s.neg_step_size * exp_avg / denom;  // p.addcdiv_(m, denom, value=-step_size)
  }
}

void adam_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamScalars& s) {
  if (s.l2 != 0)
    adam_loop<true, false>(p, g, m, v, n, s);
  else if (s.decay != 1)
    adam_loop<false, true>(p, g, m, v, n, s);
  else
    adam_loop<false, false>(p, g, m, v, n, s);
}

class Adam final : public BufferedOptimizer {
 public:
  Adam(const OptimizerConfig& config, bool decoupled)
      : BufferedOptimizer(decoupled ? "adamw" : "adam", {"exp_avg", "exp_avg_sq"}),
        config_(config),
        decoupled_(decoupled) {}

  void step(std::span<Tensor> params, std::span<const Tensor> grads, double lr) override {
    begin_step(params, grads);  // the zeroed moments need no first-step case
    AdamScalars s = adam_scalars(config_, decoupled_, lr, steps_);
    for (size_t i = 0; i < params.size(); ++i)
      adam_update(params[i].data<float>(), grads[i].data<float>(), buffers_[0][i].data<float>(),
                  buffers_[1][i].data<float>(), params[i].numel(), s);
  }

 private:
  OptimizerConfig config_;
  bool decoupled_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adam(const OptimizerConfig& config, bool decoupled) {
  return std::make_unique<Adam>(config, decoupled);
}

}  // namespace tandem::optim_detail
