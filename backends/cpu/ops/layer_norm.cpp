// layer_norm: x [*, normalized_shape] -> same; weight, bias of normalized_shape when
// elementwise_affine (bias only when bias=true). Each row (the product of the trailing
// normalized dims) is normalised with its mean and biased variance, as torch:
// y = (x - mean) / sqrt(var + eps) * weight + bias. Two passes over the row (mean, then
// squared deviations) so that large means do not cancel the variance.
//
// Backward, rows [R] of C normalized elements, xhat = (x - mean) rstd, g = dy * weight:
//   dx      = rstd (g - mean_C(g) - xhat mean_C(g xhat))   (assigned)
//   dweight += sum_R(dy xhat);  dbias += sum_R(dy)          (accumulated)
// It needs only x and the parameters: mean and rstd are recomputed (same two passes as
// forward, so forward keeps no state and an inference forward can precede backward) into
// a kernel-owned [R, 2] scratch; a first pass over rows writes dx, a second, split by
// columns so that no two threads write one element, sums the parameter gradients.
#include <cmath>

#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem {
namespace {

class LayerNormKernel final : public Kernel {
 public:
  explicit LayerNormKernel(const KernelSpec& spec) {
    const Attributes& attrs = *spec.attrs;
    const Shape& shape = spec.inputs.at(0).shape;
    std::vector<int64_t> normalized = attrs.get_ints("normalized_shape");
    if (normalized.size() > shape.size())
      throw UserError("layer_norm: normalized_shape has more dims than the input " + shape_str(shape));
    size_t lead = shape.size() - normalized.size();
    for (size_t i = 0; i < normalized.size(); ++i)
      if (shape[lead + i] != normalized[i])
        throw UserError("layer_norm: input " + shape_str(shape) + " does not end with normalized_shape " +
                        shape_str(normalized));
    eps_ = static_cast<float>(attrs.get_float("eps"));
    affine_ = attrs.get_bool("elementwise_affine");
    bias_ = affine_ && attrs.get_bool("bias");
    TANDEM_ASSERT(spec.params.size() == (affine_ ? (bias_ ? 2u : 1u) : 0u), "layer_norm: wrong parameter count");
    rows_ = dims_product(shape, 0, lead);
    cols_ = dims_product(shape, lead, shape.size());
    row_stats_.resize(static_cast<size_t>(2 * rows_));
  }

  bool backward_reads_output() const override { return false; }  // mean and rstd are recomputed from x

  void backward(const BackwardArgs& args) override {
    const float* x = args.inputs[0].data<float>();
    const float* dy = args.grad_outputs[0].data<float>();
    float* dx = args.grad_inputs[0].defined() ? args.grad_inputs[0].data<float>() : nullptr;
    const float* w = affine_ ? args.params[0].data<float>() : nullptr;
    float* dw = affine_ && args.grad_params[0].defined() ? args.grad_params[0].data<float>() : nullptr;
    float* db = bias_ && args.grad_params[1].defined() ? args.grad_params[1].data<float>() : nullptr;
    const int64_t rows = rows_, cols = cols_;
    if (rows == 0 || cols == 0) return;
    float* stats = row_stats_.data();
    const float eps = eps_, inv_cols = 1.f / static_cast<float>(cols);
    cpu::parallel_for(rows, cols * 8, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* xr = x + r * cols;
        const float* gr = dy + r * cols;
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < cols; ++c) sum += xr[c];
        const float mean = sum * inv_cols;
        float sq = 0.f;
#pragma omp simd reduction(+ : sq)
        for (int64_t c = 0; c < cols; ++c) sq += (xr[c] - mean) * (xr[c] - mean);
        const float rstd = 1.f / std::sqrt(sq * inv_cols + eps);
        stats[2 * r] = mean;
        stats[2 * r + 1] = rstd;
        if (!dx) continue;
        float sum_g = 0.f, sum_gx = 0.f;  // sum(g), sum(g xhat)
#pragma omp simd reduction(+ : sum_g, sum_gx)
        for (int64_t c = 0; c < cols; ++c) {
          const float g = w ? gr[c] * w[c] : gr[c];
          sum_g += g;
          sum_gx += g * (xr[c] - mean) * rstd;
        }
        const float mean_g = sum_g * inv_cols, mean_gx = sum_gx * inv_cols;
        float* dxr = dx + r * cols;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) {
          const float g = w ? gr[c] * w[c] : gr[c];
          dxr[c] = rstd * (g - mean_g - (xr[c] - mean) * rstd * mean_gx);
        }
      }
    });
    if (!dw && !db) return;
    cpu::parallel_for(cols, rows * 2, [&](int64_t begin, int64_t end) {
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        const float* gr = dy + r * cols;
        const float mean = stats[2 * r], rstd = stats[2 * r + 1];
        if (dw) {
#pragma omp simd
          for (int64_t c = begin; c < end; ++c) dw[c] += gr[c] * (xr[c] - mean) * rstd;
        }
        if (db) {
#pragma omp simd
          for (int64_t c = begin; c < end; ++c) db[c] += gr[c];
        }
      }
    });
  }

  void forward(const KernelArgs& args) override {
    const float* x = args.inputs[0].data<float>();
    float* y = args.outputs[0].data<float>();
    const float* w = affine_ ? args.params[0].data<float>() : nullptr;
    const float* b = bias_ ? args.params[1].data<float>() : nullptr;
    const int64_t cols = cols_;
    const float eps = eps_;
    cpu::parallel_for(rows_, cols * 4, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < cols; ++c) sum += xr[c];
        const float mean = cols > 0 ? sum / static_cast<float>(cols) : 0.f;
        float sq = 0.f;
#pragma omp simd reduction(+ : sq)
        for (int64_t c = 0; c < cols; ++c) sq += (xr[c] - mean) * (xr[c] - mean);
        const float var = cols > 0 ? sq / static_cast<float>(cols) : 0.f;
        const float rstd = 1.f / std::sqrt(var + eps);
        if (w && b) {
#pragma omp simd
          for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
        } else if (w) {
#pragma omp simd
          for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * rstd * w[c];
        } else {
#pragma omp simd
          for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * rstd;
        }
      }
    });
  }

 private:
  int64_t rows_ = 0, cols_ = 0;
  float eps_ = 1e-5f;
  bool affine_ = true, bias_ = true;
  std::vector<float> row_stats_;  // backward's per-row (mean, rstd)
};

}  // namespace

std::unique_ptr<Kernel> make_layer_norm_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<LayerNormKernel>(spec);
}

}  // namespace tandem
