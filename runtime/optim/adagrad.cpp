// Adagrad (torch.optim.Adagrad, torch 1.13) and row-wise Adagrad (torchrec's
// RowWiseAdagrad, FBGEMM's EXACT_ROWWISE_ADAGRAD): one accumulator per value, or one per row
// of a table holding the mean of the row gradient's squares. Both leave a row whose gradient
// is zero as it is (its sum grows by 0 and p + (-clr * 0) / std is p), so on an embedding
// table they visit the rows the batch looked up only, and take a `sparse: true` table's row
// gradient (core/touched_rows.h): torch's Adagrad with sparse gradients. Weight decay moves
// every row, so Adagrad with it takes dense gradients only, as torch refuses it on sparse
// ones.
//
// The operations are torch's, in its order: the dense update is addcdiv's p + (-clr * g) / std,
// the sparse one p + (g / std) * -clr (an axpy of g / std into p), so each matches the
// path torch takes for the same gradient.
#include "core/no_fp_contraction.h"

#include <cmath>

#include "runtime/optim/optimizer_impl.h"

namespace tandem::optim_detail {

namespace {

class Adagrad final : public BufferedOptimizer {
 public:
  Adagrad(const OptimizerConfig& config, bool rowwise)
      : BufferedOptimizer(rowwise ? "rowwise_adagrad" : "adagrad", {"sum"}), config_(config), rowwise_(rowwise) {
    host_state_ = true;
  }

  void step(std::span<Tensor> params, std::span<const Tensor> grads, double lr) override {
    step_rows(params, grads, {}, lr);
  }

  bool takes_row_gradients() const override { return config_.weight_decay == 0; }

  void step_rows(std::span<Tensor> params, std::span<const Tensor> grads, std::span<TouchedRows* const> rows,
                 double lr) override {
    step_each(params, grads, rows, lr);
  }

 protected:
  Shape buffer_shape(size_t, const Tensor& param) const override {
    if (!rowwise_) return param.shape();
    return {param.dim() >= 1 ? param.size(0) : 1};
  }
  float buffer_start(size_t) const override { return static_cast<float>(config_.initial_accumulator_value); }

 private:
  void update_parameter(size_t i, const Tensor& param, const Tensor& grad, TouchedRows* touched, double lr, int64_t step,
                        ParameterDevices& devices) override {
    // torch: clr = lr / (1 + (step - 1) * lr_decay) in python floats, a float32 scalar in the kernel
    const float neg_clr = static_cast<float>(-(lr / (1 + static_cast<double>(step - 1) * config_.lr_decay)));
    const float eps = static_cast<float>(config_.eps);
    const float wd = static_cast<float>(config_.weight_decay);
    const bool lazy = config_.weight_decay == 0;
    const bool row_gradient = touched && touched->holds_values();
    float* sum = buffers_[0][i].data<float>();
    for_each_updated_row(kind_, devices, param, grad, touched, lazy, [&](int64_t r, float* p, const float* g, int64_t n) {
      if (rowwise_) return rowwise_row(sum + r, p, g, n, neg_clr, eps);
      float* s = sum + r * n;
      if (row_gradient) return sparse_row(s, p, g, n, neg_clr, eps);
      dense_row(s, p, g, n, neg_clr, eps, wd);
    });
  }

  // torch's dense path: grad += wd * p; sum.addcmul_(g, g); std = sqrt(sum) + eps;
  // p.addcdiv_(g, std, value=-clr)
  static void dense_row(float* s, float* p, const float* g, int64_t n, float neg_clr, float eps, float wd) {
    for (int64_t k = 0; k < n; ++k) {
      const float gk = wd != 0 ? std::fma(p[k], wd, g[k]) : g[k];
      s[k] = s[k] + gk * gk;
      const float std_k = std::sqrt(s[k]) + eps;
      p[k] = p[k] + neg_clr * gk / std_k;
    }
  }
  // torch's sparse path: sum += g^2 at the rows; p += (g / (sqrt(sum) + eps)) * -clr
  static void sparse_row(float* s, float* p, const float* g, int64_t n, float neg_clr, float eps) {
    for (int64_t k = 0; k < n; ++k) {
      s[k] = s[k] + g[k] * g[k];
      const float std_k = std::sqrt(s[k]) + eps;
      p[k] = std::fma(g[k] / std_k, neg_clr, p[k]);
    }
  }
  // torchrec's RowWiseAdagrad: sum += mean(g^2) over the row; p.addcdiv_(g, sqrt(sum) + eps, value=-clr)
  // The squares are summed in double over 8 lanes, added up in a fixed order at the end: one
  // chain of dependent additions was most of the update's time (a row of 32 is 32 adds in a
  // row), and the lanes vectorise. Every row sums the same way, on any thread.
  static void rowwise_row(float* s, float* p, const float* g, int64_t n, float neg_clr, float eps) {
    double lanes[8] = {};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
#pragma omp simd
      for (int j = 0; j < 8; ++j) lanes[j] += static_cast<double>(g[k + j] * g[k + j]);
    for (; k < n; ++k) lanes[0] += static_cast<double>(g[k] * g[k]);
    const double squares = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    *s = *s + static_cast<float>(n > 0 ? squares / static_cast<double>(n) : 0.0);
    const float std_r = std::sqrt(*s) + eps;
#pragma omp simd
    for (int64_t e = 0; e < n; ++e) p[e] = p[e] + neg_clr * g[e] / std_r;
  }

  OptimizerConfig config_;
  bool rowwise_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adagrad(const OptimizerConfig& config, bool rowwise) {
  return std::make_unique<Adagrad>(config, rowwise);
}

}  // namespace tandem::optim_detail
