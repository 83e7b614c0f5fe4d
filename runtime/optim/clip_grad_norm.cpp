// Gradient clipping by the global L2 norm (torch.nn.utils.clip_grad_norm_, norm type 2).
#pragma GCC optimize("fp-contract=off")

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/optim/optimizer_impl.h"

namespace tandem {

namespace {

/// Sum of squares in double over fixed-size blocks added in order, so the result does
/// not depend on the number of threads.
double sum_of_squares(const float* x, int64_t n) {
  constexpr int64_t kBlock = 16384;
  int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
#pragma omp parallel for if (n > optim_detail::kParallelMinElements)
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t end = std::min(n, (b + 1) * kBlock);
    double lanes[8] = {};  // independent accumulators the compiler can vectorise
    int64_t i = b * kBlock;
    for (; i + 8 <= end; i += 8)
      for (int j = 0; j < 8; ++j) lanes[j] += static_cast<double>(x[i + j]) * static_cast<double>(x[i + j]);
    for (; i < end; ++i) lanes[0] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    double s = 0;
    for (double lane : lanes) s += lane;
    partial[static_cast<size_t>(b)] = s;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

void scale(float* x, int64_t n, float factor) {
#pragma omp parallel for if (n > optim_detail::kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

}  // namespace

double clip_grad_norm(std::span<Tensor> grads, double max_norm) {
  if (!(max_norm > 0)) throw UserError("clip_grad_norm must be > 0, got " + std::to_string(max_norm));
  double sum = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (g.device() != Device::cpu())
      throw UserError("clip_grad_norm: gradient " + std::to_string(i) + " is on " + g.device().str() +
                      "; clipping runs on host tensors");
    TANDEM_ASSERT(g.dtype() == DType::float32, "clip_grad_norm: gradient " + std::to_string(i) + " is not float32");
    sum += sum_of_squares(g.data<float>(), g.numel());
  }
  double total_norm = std::sqrt(sum);
  double clip_coef = max_norm / (total_norm + 1e-6);
  if (clip_coef < 1) {
    // torch multiplies by the float32 coefficient; a non-finite norm gives 0 here (inf)
    // or no scaling (NaN), and the caller sees the norm it returns.
    for (Tensor& g : grads) scale(g.data<float>(), g.numel(), static_cast<float>(clip_coef));
  }
  return total_norm;
}

}  // namespace tandem
