#include "backends/cpu/loss.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace tandem::cpu {
namespace {

// input [N, C] logits (cross_entropy) or log-probabilities (nll_loss), target [N].
// torch 1.13: with label smoothing e, loss_i = (1-e) * nll_i + e/C * sum_c(-logp_ic), and
// `mean` divides both parts by the number of targets not ignored.
LossValue classification_loss(const LossSpec& spec, const Tensor& input, const Tensor& target, Tensor* grad) {
  const int64_t n = input.size(0), c = input.size(1);
  TANDEM_ASSERT(target.numel() == n, "a class target holds one index per input row");  // any shape, read flattened
  const float* x = input.data<float>();
  const int64_t* t = target.data<int64_t>();
  const bool logits = spec.op == "cross_entropy";
  const double eps = spec.label_smoothing;
  LossValue out;
  std::vector<double> logp(c), shifted_exp(c);
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * c;
    if (t[i] != spec.ignore_index && (t[i] < 0 || t[i] >= c))
      throw UserError(spec.op + ": target " + std::to_string(t[i]) + " of sample " + std::to_string(i) +
                      " is outside the classes [0, " + std::to_string(c) + ")");
    if (t[i] == spec.ignore_index) continue;
    ++out.counted;
    if (std::max_element(row, row + c) - row == t[i]) ++out.correct;
  }
  const double scale = spec.reduction == "mean" ? (out.counted > 0 ? 1.0 / out.counted : NAN) : 1.0;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * c;
    float* g = grad && grad->defined() ? grad->data<float>() + i * c : nullptr;
    if (t[i] == spec.ignore_index) {
      if (g) std::fill(g, g + c, 0.0f);
      continue;
    }
    double log_sum = 0, inv_sum = 0;
    if (logits) {  // one exp per element: the softmax of the gradient reuses them
      double m = *std::max_element(row, row + c), sum = 0;
      for (int64_t k = 0; k < c; ++k) sum += (shifted_exp[k] = std::exp(row[k] - m));
      log_sum = m + std::log(sum);
      inv_sum = 1 / sum;
    }
    double smooth = 0;
    for (int64_t k = 0; k < c; ++k) {
      logp[k] = row[k] - log_sum;
      smooth -= logp[k];
    }
    total += (1 - eps) * -logp[t[i]] + eps / c * smooth;
    if (!g) continue;
    for (int64_t k = 0; k < c; ++k) {
      // d/dx of (1-e)(-logp_t) + e/C sum(-logp): softmax - target distribution (logits);
      // for log-probability input, the derivative with respect to logp directly
      double target_mass = (k == t[i] ? 1 - eps : 0) + eps / c;
      double d = logits ? shifted_exp[k] * inv_sum - target_mass : -target_mass;
      g[k] = static_cast<float>(d * scale);
    }
  }
  out.loss = total * scale;
  return out;
}

LossValue elementwise_loss(const LossSpec& spec, const Tensor& input, const Tensor& target, Tensor* grad) {
  const int64_t n = input.numel();
  const float* x = input.data<float>();
  const float* t = target.data<float>();
  float* g = grad && grad->defined() ? grad->data<float>() : nullptr;
  const double scale = spec.reduction == "mean" ? 1.0 / std::max<int64_t>(n, 1) : 1.0;
  const bool mse = spec.op == "mse_loss";
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    double xi = x[i], ti = t[i];
    if (mse) {
      total += (xi - ti) * (xi - ti);
      if (g) g[i] = static_cast<float>(2 * (xi - ti) * scale);
    } else {  // numerically stable: max(x, 0) - x t + log(1 + exp(-|x|))
      total += std::max(xi, 0.0) - xi * ti + std::log1p(std::exp(-std::abs(xi)));
      if (g) g[i] = static_cast<float>((1 / (1 + std::exp(-xi)) - ti) * scale);
    }
  }
  LossValue out;
  out.loss = total * scale;
  out.counted = n;
  if (!mse) {
    out.scores.assign(x, x + n);
    out.labels.assign(t, t + n);
  }
  return out;
}

}  // namespace

LossValue compute_loss(const LossSpec& spec, const Tensor& input, const Tensor& target, Tensor* grad_input) {
  if (spec.op == "cross_entropy" || spec.op == "nll_loss") return classification_loss(spec, input, target, grad_input);
  return elementwise_loss(spec, input, target, grad_input);
}

}  // namespace tandem::cpu
