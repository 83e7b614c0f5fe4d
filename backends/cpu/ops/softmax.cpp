// normalize (F.normalize, p = 2) at the end of the file.
//
// softmax, log_softmax over attribute `dim` (negative counts from the end), any rank:
// [*] -> [*]. The tensor is viewed as [outer, axis, inner]. Numerically stable: the
// row maximum is subtracted before exp. Small tensors run our loop; from
// kSoftmaxMinElements up, oneDNN's softmax_forward / logsoftmax_forward.
//
// Backward, per lane (the axis elements at fixed outer, inner), from the output y only:
//   softmax:     dx = y (dy - sum_axis(dy y) / sum_axis(y))   (assigned; Note [softmax's
//                gradient sums to zero]), our loop at every size
//   log_softmax: dx = dy - exp(y) sum_axis(dy)
//                our loop, or oneDNN's logsoftmax_backward from kSoftmaxMinElements up
//
// Note [softmax's gradient sums to zero]: softmax ignores a shift of its input, so its
// gradient sums to zero along the axis; what a layer before it learns from a sum over the
// axis (swin v2's logit scale, a temperature: sum(dx * cosines)) is all cancellation. With
// torch's y (dy - sum(dy y)) that holds only as far as sum(y) = 1, and oneDNN's forward on
// AVX2 is a few ulps from that: a logit scale's gradient was then 7e-4 from the exact one,
// 9x torch's float32 error. Dividing by sum(y) makes it the gradient of y / sum(y), equal
// to softmax's in exact arithmetic, whose sum is zero whatever y's rounding; the sums run
// in double.
#include <algorithm>
#include <cmath>
#include <optional>

#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem {
namespace {

constexpr int64_t kSoftmaxMinElements = 4096;

class SoftmaxKernel final : public Kernel {
 public:
  SoftmaxKernel(CpuContext& ctx, const KernelSpec& spec, bool log) : ctx_(ctx), log_(log) {
    const AroundDim around =
        around_dim(spec.inputs.at(0).shape, spec.attrs->get_int("dim"), log ? "log_softmax" : "softmax");
    outer_ = around.outer, axis_ = around.axis, inner_ = around.inner;
    int64_t n = outer_ * axis_ * inner_;
    if (n < kSoftmaxMinElements) return;
    std::optional<cpu::ScopedMaxThreads> one_thread;
    if (n * 8 < cpu::kParallelThreshold) one_thread.emplace(1);
    dnnl::memory::desc md({outer_, axis_, inner_}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::abc);
    dnnl::primitive prim = ctx.cached_primitive(cpu::spec_key(spec), [&]() -> dnnl::primitive {
      if (log) {
        dnnl::logsoftmax_forward::desc desc(dnnl::prop_kind::forward_inference, md, 1);
        return dnnl::logsoftmax_forward(dnnl::logsoftmax_forward::primitive_desc(desc, user_scratchpad_attr(), ctx.engine()));
      }
      dnnl::softmax_forward::desc desc(dnnl::prop_kind::forward_inference, md, 1);
      return dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(desc, user_scratchpad_attr(), ctx.engine()));
    });
    call_ = cpu::DnnlCall(prim);
    src_ = call_.bind(DNNL_ARG_SRC, md, ctx.engine());
    dst_ = call_.bind(DNNL_ARG_DST, md, ctx.engine());
    if (!log) return;  // softmax's backward is our loop at every size (Note [softmax's gradient sums to zero])
    dnnl::primitive bwd = ctx.cached_primitive(cpu::spec_key(spec) + "#bwd", [&]() -> dnnl::primitive {
      dnnl::logsoftmax_forward::primitive_desc hint(
          dnnl::logsoftmax_forward::desc(dnnl::prop_kind::forward_training, md, 1), ctx.engine());
      return dnnl::logsoftmax_backward(dnnl::logsoftmax_backward::primitive_desc(
          dnnl::logsoftmax_backward::desc(md, md, 1), user_scratchpad_attr(), ctx.engine(), hint));
    });
    bwd_ = cpu::DnnlCall(bwd);
    bwd_dst_ = bwd_.bind(DNNL_ARG_DST, md, ctx.engine());
    bwd_diff_dst_ = bwd_.bind(DNNL_ARG_DIFF_DST, md, ctx.engine());
    bwd_diff_src_ = bwd_.bind(DNNL_ARG_DIFF_SRC, md, ctx.engine());
  }

  bool backward_reads_input(size_t) const override { return false; }  // from the output

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    const float* y = args.outputs[0].data<float>();
    const float* g = args.grad_outputs[0].data<float>();
    float* dx = args.grad_inputs[0].data<float>();
    if (bwd_.valid()) {
      bwd_.set(bwd_dst_, y);
      bwd_.set(bwd_diff_dst_, g);
      bwd_.set(bwd_diff_src_, dx);
      bwd_.run(ctx_);
      return;
    }
    const int64_t axis = axis_, inner = inner_;
    const bool log = log_;
    cpu::parallel_for(outer_ * inner_, axis * 6, [&](int64_t begin, int64_t end) {
      for (int64_t lane = begin; lane < end; ++lane) {
        const int64_t base = (lane / inner) * axis * inner + lane % inner;
        const float* yl = y + base;
        const float* gl = g + base;
        float* dl = dx + base;
        if (log) {
          float sum = 0.f;
          for (int64_t a = 0; a < axis; ++a) sum += gl[a * inner];
          for (int64_t a = 0; a < axis; ++a) dl[a * inner] = gl[a * inner] - std::exp(yl[a * inner]) * sum;
          continue;
        }
        double dot = 0, total = 0;
#pragma omp simd reduction(+ : dot, total)
        for (int64_t a = 0; a < axis; ++a) {
          dot += static_cast<double>(gl[a * inner]) * yl[a * inner];
          total += yl[a * inner];
        }
        const auto mean = static_cast<float>(dot / total);
#pragma omp simd
        for (int64_t a = 0; a < axis; ++a) dl[a * inner] = yl[a * inner] * (gl[a * inner] - mean);
      }
    });
  }

  void forward(const KernelArgs& args) override {
    const float* x = args.inputs[0].data<float>();
    float* y = args.outputs[0].data<float>();
    if (call_.valid()) {
      call_.set(src_, x);
      call_.set(dst_, y);
      call_.run(ctx_);
      return;
    }
    // One "lane" is the axis_ elements at fixed (outer, inner), inner_ apart.
    const int64_t axis = axis_, inner = inner_;
    const bool log = log_;
    cpu::parallel_for(outer_ * inner_, axis * 8, [&](int64_t begin, int64_t end) {
      for (int64_t lane = begin; lane < end; ++lane) {
        const int64_t base = (lane / inner) * axis * inner + lane % inner;
        const float* xl = x + base;
        float* yl = y + base;
        float mx = -INFINITY;
        for (int64_t a = 0; a < axis; ++a) mx = std::max(mx, xl[a * inner]);
        if (std::isinf(mx) && mx < 0) mx = 0.f;  // all -inf: NaN out, as torch, not inf - inf
        float sum = 0.f;
        for (int64_t a = 0; a < axis; ++a) {
          float e = std::exp(xl[a * inner] - mx);
          if (!log) yl[a * inner] = e;
          sum += e;
        }
        if (log) {
          const float shift = mx + std::log(sum);
          for (int64_t a = 0; a < axis; ++a) yl[a * inner] = xl[a * inner] - shift;
        } else {
          const float scale = 1.f / sum;
          for (int64_t a = 0; a < axis; ++a) yl[a * inner] *= scale;
        }
      }
    });
  }

 private:
  CpuContext& ctx_;
  bool log_;
  int64_t outer_ = 1, axis_ = 1, inner_ = 1;
  cpu::DnnlCall call_;
  size_t src_ = 0, dst_ = 0;
  cpu::DnnlCall bwd_;
  size_t bwd_dst_ = 0, bwd_diff_dst_ = 0, bwd_diff_src_ = 0;
};

/// normalize along `dim` (F.normalize, p = 2): y = x / d, d = max(||x||, eps) per lane.
/// Backward from the input (torch's through its clamp_min): where ||x|| >= eps,
/// dx = (dy - y sum_axis(dy y)) / ||x||; below it d is the constant eps, so dx = dy / eps.
/// A loop of its own (a lane is read twice, for its norm and its quotient): oneDNN's
/// reduction would give the norms, but not the quotient nor its backward.
class NormalizeKernel final : public Kernel {
 public:
  explicit NormalizeKernel(const KernelSpec& spec) : eps_(static_cast<float>(spec.attrs->get_float("eps"))) {
    const AroundDim around = around_dim(spec.inputs.at(0).shape, spec.attrs->get_int("dim"), "normalize");
    outer_ = around.outer, axis_ = around.axis, inner_ = around.inner;
  }

  bool backward_reads_input(size_t) const override { return true; }
  bool backward_reads_output() const override { return false; }

  void forward(const KernelArgs& args) override {
    const float* x = args.inputs[0].data<float>();
    float* y = args.outputs[0].data<float>();
    const int64_t axis = axis_, inner = inner_;
    cpu::parallel_for(outer_ * inner_, axis * 4, [&](int64_t begin, int64_t end) {
      for (int64_t lane = begin; lane < end; ++lane) {
        const int64_t base = (lane / inner) * axis * inner + lane % inner;
        const float d = std::max(lane_norm(x + base), eps_);
        for (int64_t a = 0; a < axis; ++a) y[base + a * inner] = x[base + a * inner] / d;
      }
    });
  }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    const float* x = args.inputs[0].data<float>();
    const float* g = args.grad_outputs[0].data<float>();
    float* dx = args.grad_inputs[0].data<float>();
    const int64_t axis = axis_, inner = inner_;
    cpu::parallel_for(outer_ * inner_, axis * 6, [&](int64_t begin, int64_t end) {
      for (int64_t lane = begin; lane < end; ++lane) {
        const int64_t base = (lane / inner) * axis * inner + lane % inner;
        const float n = lane_norm(x + base);
        if (n < eps_) {
          for (int64_t a = 0; a < axis; ++a) dx[base + a * inner] = g[base + a * inner] / eps_;
          continue;
        }
        float gx = 0.f;  // sum(dy x) / n^2 = sum(dy y) / n
        for (int64_t a = 0; a < axis; ++a) gx += g[base + a * inner] * x[base + a * inner];
        gx /= n * n;
        for (int64_t a = 0; a < axis; ++a)
          dx[base + a * inner] = (g[base + a * inner] - x[base + a * inner] * gx) / n;
      }
    });
  }

 private:
  float lane_norm(const float* xl) const {
    float sum = 0.f;
    for (int64_t a = 0; a < axis_; ++a) sum += xl[a * inner_] * xl[a * inner_];
    return std::sqrt(sum);
  }

  float eps_;
  int64_t outer_ = 1, axis_ = 1, inner_ = 1;
};

}  // namespace

std::unique_ptr<Kernel> make_normalize_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<NormalizeKernel>(spec);
}
std::unique_ptr<Kernel> make_softmax_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<SoftmaxKernel>(ctx, spec, false);
}
std::unique_ptr<Kernel> make_log_softmax_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<SoftmaxKernel>(ctx, spec, true);
}

}  // namespace tandem
