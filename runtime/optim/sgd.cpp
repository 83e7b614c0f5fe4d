// SGD with momentum, dampening, Nesterov and L2 weight decay: torch.optim.SGD's
// single-tensor update (torch 1.13), operation for operation.
//
// Note [matching torch bit for bit]: torch's CPU kernels compute `a.add_(b, alpha=s)` as
// fma(b, s, a) (its vectorised and scalar loops are both contracted), with the python
// float scalars rounded to float32. We write those fmas explicitly and switch off the
// compiler's own contraction, which could fuse other pairs than torch does.
#pragma GCC optimize("fp-contract=off")

#include <cmath>
#include <type_traits>

#include "runtime/optim/optimizer_impl.h"
#include "backends/update_scalars.h"

namespace tandem::optim_detail {

namespace {

/// p, g, buf: n elements. The flags are template arguments so that the loop has no
/// branches and vectorises. kFirst: the buffer holds no history and becomes a copy of d_p.
template <bool kWeightDecay, bool kMomentum, bool kNesterov, bool kFirst>
void sgd_loop(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t n,
              const SgdScalars s) {
#pragma omp parallel for if (n > kParallelMinElements)
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

void sgd_update(float* p, const float* g, float* buf, int64_t n, const SgdScalars& s, bool first) {
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

class Sgd final : public BufferedOptimizer {
 public:
  explicit Sgd(const OptimizerConfig& config)
      : BufferedOptimizer("sgd", config.momentum != 0 ? std::vector<std::string>{"momentum_buffer"}
                                                      : std::vector<std::string>{}),
        config_(config) {}

  void step(std::span<Tensor> params, std::span<const Tensor> grads, double lr) override {
    for (const Tensor& g : grads) TANDEM_ASSERT(g.defined(), "sgd step: a row gradient goes to step_rows()");
    bool first = begin_step(params, grads);
    const SgdScalars s = sgd_scalars(config_, lr);
    for (size_t i = 0; i < params.size(); ++i) {
      float* buf = buffers_.empty() ? nullptr : buffers_[0][i].data<float>();
      sgd_update(params[i].data<float>(), grads[i].data<float>(), buf, params[i].numel(), s, first);
    }
  }

  // Without momentum and weight decay, p = fma(g, -lr, p) is p itself where g is +0 (as
  // zeroing writes it), so the rows nobody touched can be skipped: the bits of step().
  bool takes_row_gradients() const override { return config_.momentum == 0 && config_.weight_decay == 0; }

  void step_rows(std::span<Tensor> params, std::span<const Tensor> grads, std::span<TouchedRows* const> rows,
                 double lr) override {
    if (!takes_row_gradients()) return step(params, grads, lr);
    TANDEM_ASSERT(rows.size() == params.size(), "sgd: one touched-rows entry per parameter");
    bool first = begin_step(params, grads);
    const SgdScalars s = sgd_scalars(config_, lr);
    for (size_t i = 0; i < params.size(); ++i) {
      float* p = params[i].data<float>();
      const float* g = grads[i].defined() ? grads[i].data<float>() : nullptr;
      TouchedRows* touched = rows[i];
      if (touched && touched->holds_values()) {  // a row gradient: its rows are the gradient
        const int64_t width = touched->width();
        for (int64_t r : touched->list()) sgd_update(p + r * width, touched->values_of(r), nullptr, width, s, first);
        continue;
      }
      if (!touched || touched->all() || touched->rows() <= 0) {
        sgd_update(p, g, nullptr, params[i].numel(), s, first);
        continue;
      }
      const int64_t width = params[i].numel() / touched->rows();
      for (int64_t r : touched->list()) sgd_update(p + r * width, g + r * width, nullptr, width, s, first);
    }
  }

 private:
  OptimizerConfig config_;
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& config) { return std::make_unique<Sgd>(config); }

}  // namespace tandem::optim_detail
