// torch.optim.SparseAdam (torch 1.13): Adam whose moments move only at the rows a gradient
// holds ("lazy" Adam). The step count, and so the bias correction, is the parameter's
// steps, as torch counts them; a row not looked up keeps its moments and its weights. For
// the row gradients of `sparse: true` tables (core/touched_rows.h): torch's SparseAdam
// refuses dense gradients, and Tandem refuses it for a parameter without row gradients.
// Operation for operation torch's:
//   m_upd = (g - m) * (1 - beta1); m += m_upd; v_upd = (g^2 - v) * (1 - beta2); v += v_upd;
//   p += -step_size * ((m_upd + m_old) / (sqrt(v_upd + v_old) + eps)),
//   step_size = lr * sqrt(1 - beta2^step) / (1 - beta1^step).
#include "core/no_fp_contraction.h"

#include <cmath>

#include "runtime/optim/optimizer_impl.h"

namespace tandem::optim_detail {

namespace {

class SparseAdam final : public BufferedOptimizer {
 public:
  explicit SparseAdam(const OptimizerConfig& config)
      : BufferedOptimizer("sparse_adam", {"exp_avg", "exp_avg_sq"}), config_(config) {
    host_state_ = true;
  }

  void step(std::span<Tensor> params, std::span<const Tensor> grads, double lr) override {
    step_rows(params, grads, {}, lr);
  }

  bool takes_row_gradients() const override { return true; }

  void step_rows(std::span<Tensor> params, std::span<const Tensor> grads, std::span<TouchedRows* const> rows,
                 double lr) override {
    step_each(params, grads, rows, lr);
  }

  void update_parameter(size_t i, const Tensor& param, const Tensor& grad, TouchedRows* rows, double lr, int64_t step,
                        ParameterDevices& devices) override {
    const double bias_correction1 = 1 - std::pow(config_.beta1, static_cast<double>(step));
    const double bias_correction2 = 1 - std::pow(config_.beta2, static_cast<double>(step));
    const float neg_step_size = static_cast<float>(-(lr * std::sqrt(bias_correction2) / bias_correction1));
    const float one_minus_beta1 = static_cast<float>(1 - config_.beta1);
    const float one_minus_beta2 = static_cast<float>(1 - config_.beta2);
    const float eps = static_cast<float>(config_.eps);
    float* exp_avg = buffers_[0][i].data<float>();
    float* exp_avg_sq = buffers_[1][i].data<float>();
    for_each_updated_row(kind_, devices, param, grad, rows, true, [&](int64_t r, float* p, const float* g, int64_t n) {
      float* m = exp_avg + r * n;
      float* v = exp_avg_sq + r * n;
      for (int64_t k = 0; k < n; ++k) {
        const float m_old = m[k], v_old = v[k];
        const float m_upd = (g[k] - m_old) * one_minus_beta1;
        const float v_upd = (g[k] * g[k] - v_old) * one_minus_beta2;
        m[k] = m_old + m_upd;
        v[k] = v_old + v_upd;
        const float denom = std::sqrt(v_upd + v_old) + eps;
        p[k] = p[k] + neg_step_size * ((m_upd + m_old) / denom);
      }
    });
  }

 private:
  OptimizerConfig config_;
};

}  // namespace

std::unique_ptr<Optimizer> make_sparse_adam(const OptimizerConfig& config) {
  return std::make_unique<SparseAdam>(config);
}

}  // namespace tandem::optim_detail
