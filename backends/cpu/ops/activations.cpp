// relu, tanh, sigmoid, gelu (approximate "none" = exact erf, "tanh" = tanh formula), relu6,
// hardswish, hardsigmoid, silu, mish, exp: [*] -> [*], elementwise; and clamp (below).
// relu is a vectorised loop at every size, and so is hardsigmoid, which oneDNN 2.6 lacks.
// The others use a scalar libm loop for small tensors (no oneDNN call overhead) and
// oneDNN's JIT eltwise, whose vectorised exp/erf/tanh are much faster, from
// kEltwiseMinElements up: relu6 is its clip_v2 on [0, 6], silu its swish with alpha 1.
//
// Backward, dy [*] -> dx [*] (assigned), torch's derivatives:
//   relu: dy where y > 0 (y > 0 exactly where x > 0; reading y keeps an in-place relu right)
//   relu6: dy where 0 < y < 6 (torch's hardtanh: 0 at both bounds; from the output, as relu)
//   tanh: dy (1 - y^2); sigmoid: dy y (1 - y)  (from the output)
//   gelu: dy (Phi(x) + x phi(x)) exact; the tanh form's derivative as torch writes it (from the input)
//   hardswish: 0 below -3, dy (x / 3 + 1/2) up to 3, dy above; hardsigmoid: dy / 6 on (-3, 3)
//   silu: dy s (1 + x (1 - s)), s = sigmoid(x); mish: dy (t + x s (1 - t^2)), t = tanh(softplus(x))
//   (from the input); exp: dy y (from the output)
//
// clamp: min(max(x, min), max), either bound optional; dx = dy where min <= x <= max, else 0
// (torch's: the gradient passes at the bounds). A loop at every size: oneDNN's clip passes
// no gradient at its lower bound, and the loop is as cheap as relu's.
// Same split as forward: a loop for small tensors, oneDNN eltwise_backward (the *_use_dst_for_bwd
// algorithms for tanh, sigmoid and relu6) from kEltwiseMinElements up, built in the factory;
// hardswish's backward is the loop at every size (oneDNN's differs from torch's at -3 and 3).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem {
namespace {

constexpr int64_t kEltwiseMinElements = 4096;

enum class Act { relu, tanh, sigmoid, gelu_erf, gelu_tanh, relu6, hardswish, hardsigmoid, silu, mish, exp };

/// relu6(x + 3) / 6, the gate of hardswish and hardsigmoid, computed as torch does.
inline float hard_gate6(float x) { return std::min(std::max(x + 3.f, 0.f), 6.f); }

/// log(1 + e^x), as torch's mish computes it.
inline float softplus(float x) { return std::log1p(std::exp(x)); }

inline float apply(Act act, float x) {
  switch (act) {
    case Act::relu: return x < 0.f ? 0.f : x;
    case Act::tanh: return std::tanh(x);
    case Act::sigmoid: return 1.f / (1.f + std::exp(-x));
    case Act::gelu_erf: return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f));
    case Act::gelu_tanh: {
      const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.f + std::tanh(inner));
    }
    case Act::relu6: return x < 0.f ? 0.f : (x > 6.f ? 6.f : x);
    case Act::hardswish: return x * hard_gate6(x) / 6.f;
    case Act::hardsigmoid: return hard_gate6(x) / 6.f;
    case Act::silu: return x / (1.f + std::exp(-x));
    case Act::mish: return x * std::tanh(softplus(x));
    case Act::exp: return std::exp(x);
  }
  return x;
}

/// Whether oneDNN 2.6 has the activation as an eltwise algorithm (hardsigmoid came in 3.0).
bool has_dnnl_algorithm(Act act) { return act != Act::hardsigmoid; }

dnnl::algorithm dnnl_algorithm(Act act) {
  switch (act) {
    case Act::relu: return dnnl::algorithm::eltwise_relu;
    case Act::tanh: return dnnl::algorithm::eltwise_tanh;
    case Act::sigmoid: return dnnl::algorithm::eltwise_logistic;
    case Act::gelu_erf: return dnnl::algorithm::eltwise_gelu_erf;
    case Act::gelu_tanh: return dnnl::algorithm::eltwise_gelu_tanh;
    case Act::relu6: return dnnl::algorithm::eltwise_clip_v2;  // clip_v2: derivative 0 at both bounds, as torch
    case Act::hardswish: return dnnl::algorithm::eltwise_hardswish;
    case Act::silu: return dnnl::algorithm::eltwise_swish;
    case Act::mish: return dnnl::algorithm::eltwise_mish;
    case Act::exp: return dnnl::algorithm::eltwise_exp;
    case Act::hardsigmoid: break;
  }
  return dnnl::algorithm::eltwise_relu;
}

/// Whether oneDNN's derivative is torch's at every point: its hardswish's is 0 at -3 and 1
/// at 3, where torch's is -1/2 and 3/2, so hardswish's backward is the loop at every size
/// (piecewise linear: as fast as oneDNN's).
bool dnnl_backward_is_torchs(Act act) { return act != Act::hardswish; }

/// oneDNN's alpha and beta for the algorithm: clip's bounds, swish's scale.
float dnnl_alpha(Act act) { return act == Act::silu ? 1.f : 0.f; }
float dnnl_beta(Act act) { return act == Act::relu6 ? 6.f : 0.f; }

/// dx for one element, from the input x, the output y and the output gradient g.
inline float apply_grad(Act act, float x, float y, float g) {
  switch (act) {
    case Act::relu: return y > 0.f ? g : 0.f;
    case Act::tanh: return g * (1.f - y * y);
    case Act::sigmoid: return g * y * (1.f - y);
    case Act::gelu_erf: {
      const float cdf = 0.5f * (1.f + std::erf(x * 0.70710678118654752f));
      const float pdf = 0.39894228040143268f * std::exp(-0.5f * x * x);
      return g * (cdf + x * pdf);
    }
    case Act::gelu_tanh: {
      constexpr float kBeta = 0.79788456080286536f, kKappa = 0.044715f;
      const float x_sq = x * x;
      const float t = std::tanh(kBeta * (x + kKappa * x_sq * x));
      const float left_derivative = 0.5f * (1.f + t);
      const float right_derivative = 0.5f * x * (1.f - t * t) * kBeta * (1.f + 3.f * kKappa * x_sq);
      return g * (left_derivative + right_derivative);
    }
    case Act::relu6: return y > 0.f && y < 6.f ? g : 0.f;
    case Act::hardswish: return x < -3.f ? 0.f : (x <= 3.f ? g * (x / 3.f + 0.5f) : g);
    case Act::hardsigmoid: return x > -3.f && x < 3.f ? g / 6.f : 0.f;
    case Act::silu: {
      const float s = 1.f / (1.f + std::exp(-x));
      return g * s * (1.f + x * (1.f - s));
    }
    case Act::mish: {
      const float t = std::tanh(softplus(x));
      const float s = 1.f / (1.f + std::exp(-x));
      return g * (t + x * s * (1.f - t * t));
    }
    case Act::exp: return g * y;
  }
  return g;
}

/// The oneDNN algorithm for backward: tanh and sigmoid read the output instead of the input.
dnnl::algorithm dnnl_backward_algorithm(Act act) {
  switch (act) {
    case Act::tanh: return dnnl::algorithm::eltwise_tanh_use_dst_for_bwd;
    case Act::sigmoid: return dnnl::algorithm::eltwise_logistic_use_dst_for_bwd;
    case Act::relu6: return dnnl::algorithm::eltwise_clip_v2_use_dst_for_bwd;
    case Act::exp: return dnnl::algorithm::eltwise_exp_use_dst_for_bwd;
    default: return dnnl_algorithm(act);
  }
}

bool gradient_from_output(Act act) {
  return act == Act::relu || act == Act::tanh || act == Act::sigmoid || act == Act::relu6 || act == Act::exp;
}

/// Elements per thread worth splitting for: the piecewise-linear ones are as cheap as relu.
constexpr int64_t loop_cost(Act act) {
  return act == Act::relu || act == Act::relu6 || act == Act::hardswish || act == Act::hardsigmoid ? 1 : 16;
}

template <Act A>
void run_grad_loop(const float* x, const float* y, const float* g, float* dx, int64_t n) {
  cpu::parallel_for(n, loop_cost(A), [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) dx[i] = apply_grad(A, x[i], y[i], g[i]);
  });
}

template <Act A>
void run_loop(const float* x, float* y, int64_t n) {
  cpu::parallel_for(n, loop_cost(A), [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) y[i] = apply(A, x[i]);
  });
}

class ActivationKernel final : public Kernel {
 public:
  ActivationKernel(CpuContext& ctx, const KernelSpec& spec, Act act) : ctx_(ctx), act_(act) {
    n_ = shape_numel(spec.inputs.at(0).shape);
    if (act == Act::relu || !has_dnnl_algorithm(act) || n_ < kEltwiseMinElements) return;
    std::optional<cpu::ScopedMaxThreads> one_thread;
    if (n_ * 4 < cpu::kParallelThreshold) one_thread.emplace(1);  // vectorised: ~4x cheaper per element than our loop
    dnnl::memory::desc md({n_}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
    dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl_algorithm(act), md, dnnl_alpha(act),
                                     dnnl_beta(act));
    dnnl::eltwise_forward::primitive_desc pd(desc, user_scratchpad_attr(), ctx.engine());
    call_ = cpu::DnnlCall(ctx.cached_primitive(cpu::spec_key(spec), [&] { return dnnl::eltwise_forward(pd); }));
    src_ = call_.bind(DNNL_ARG_SRC, md, ctx.engine());
    dst_ = call_.bind(DNNL_ARG_DST, md, ctx.engine());
    if (dnnl_backward_is_torchs(act)) make_backward_primitive(spec, md);
  }

  // relu, relu6, tanh and sigmoid differentiate from the output, the others from the input
  bool backward_reads_input(size_t) const override { return !gradient_from_output(act_); }
  bool backward_reads_output() const override { return gradient_from_output(act_); }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    const float* x = args.inputs[0].data<float>();
    const float* y = args.outputs[0].data<float>();
    const float* g = args.grad_outputs[0].data<float>();
    float* dx = args.grad_inputs[0].data<float>();
    // The executor keeps only what backward reads (the input or the output): the loop below
    // loads both and uses one, and a load through the null pointer of the other is undefined
    // (UBSan found it), so it reads the kept one twice.
    if (x == nullptr) x = y;
    if (y == nullptr) y = x;
    if (bwd_.valid()) {
      bwd_.set(bwd_data_, gradient_from_output(act_) ? y : x);
      bwd_.set(bwd_diff_dst_, g);
      bwd_.set(bwd_diff_src_, dx);
      bwd_.run(ctx_);
      return;
    }
    switch (act_) {
      case Act::relu: return run_grad_loop<Act::relu>(x, y, g, dx, n_);
      case Act::tanh: return run_grad_loop<Act::tanh>(x, y, g, dx, n_);
      case Act::sigmoid: return run_grad_loop<Act::sigmoid>(x, y, g, dx, n_);
      case Act::gelu_erf: return run_grad_loop<Act::gelu_erf>(x, y, g, dx, n_);
      case Act::gelu_tanh: return run_grad_loop<Act::gelu_tanh>(x, y, g, dx, n_);
      case Act::relu6: return run_grad_loop<Act::relu6>(x, y, g, dx, n_);
      case Act::hardswish: return run_grad_loop<Act::hardswish>(x, y, g, dx, n_);
      case Act::hardsigmoid: return run_grad_loop<Act::hardsigmoid>(x, y, g, dx, n_);
      case Act::silu: return run_grad_loop<Act::silu>(x, y, g, dx, n_);
      case Act::mish: return run_grad_loop<Act::mish>(x, y, g, dx, n_);
      case Act::exp: return run_grad_loop<Act::exp>(x, y, g, dx, n_);
    }
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
    switch (act_) {
      case Act::relu: return run_loop<Act::relu>(x, y, n_);
      case Act::tanh: return run_loop<Act::tanh>(x, y, n_);
      case Act::sigmoid: return run_loop<Act::sigmoid>(x, y, n_);
      case Act::gelu_erf: return run_loop<Act::gelu_erf>(x, y, n_);
      case Act::gelu_tanh: return run_loop<Act::gelu_tanh>(x, y, n_);
      case Act::relu6: return run_loop<Act::relu6>(x, y, n_);
      case Act::hardswish: return run_loop<Act::hardswish>(x, y, n_);
      case Act::hardsigmoid: return run_loop<Act::hardsigmoid>(x, y, n_);
      case Act::silu: return run_loop<Act::silu>(x, y, n_);
      case Act::mish: return run_loop<Act::mish>(x, y, n_);
      case Act::exp: return run_loop<Act::exp>(x, y, n_);
    }
  }

 private:
  /// eltwise_backward of the backward algorithm; called under forward's thread limit.
  void make_backward_primitive(const KernelSpec& spec, const dnnl::memory::desc& md) {
    const dnnl::algorithm alg = dnnl_backward_algorithm(act_);
    dnnl::eltwise_forward::primitive_desc hint(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, md, dnnl_alpha(act_), dnnl_beta(act_)),
        ctx_.engine());
    dnnl::eltwise_backward::primitive_desc pd(
        dnnl::eltwise_backward::desc(alg, md, md, dnnl_alpha(act_), dnnl_beta(act_)), user_scratchpad_attr(),
        ctx_.engine(), hint);
    bwd_ = cpu::DnnlCall(
        ctx_.cached_primitive(cpu::spec_key(spec) + "#bwd", [&] { return dnnl::eltwise_backward(pd); }));
    bwd_data_ = bwd_.bind(gradient_from_output(act_) ? DNNL_ARG_DST : DNNL_ARG_SRC, md, ctx_.engine());
    bwd_diff_dst_ = bwd_.bind(DNNL_ARG_DIFF_DST, md, ctx_.engine());
    bwd_diff_src_ = bwd_.bind(DNNL_ARG_DIFF_SRC, md, ctx_.engine());
  }

  CpuContext& ctx_;
  Act act_;
  int64_t n_ = 0;
  cpu::DnnlCall call_;
  size_t src_ = 0, dst_ = 0;
  cpu::DnnlCall bwd_;
  size_t bwd_data_ = 0, bwd_diff_dst_ = 0, bwd_diff_src_ = 0;
};

class ClampKernel final : public Kernel {
 public:
  explicit ClampKernel(const KernelSpec& spec)
      : lo_(spec.attrs->is_null("min") ? -std::numeric_limits<float>::infinity()
                                       : static_cast<float>(spec.attrs->get_float("min"))),
        hi_(spec.attrs->is_null("max") ? std::numeric_limits<float>::infinity()
                                       : static_cast<float>(spec.attrs->get_float("max"))) {}

  bool backward_reads_input(size_t) const override { return true; }
  bool backward_reads_output() const override { return false; }

  void forward(const KernelArgs& args) override {
    const float* x = args.inputs[0].data<float>();
    float* y = args.outputs[0].data<float>();
    const float lo = lo_, hi = hi_;
    cpu::parallel_for(args.outputs[0].numel(), 1, [&](int64_t begin, int64_t end) {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) y[i] = std::min(std::max(x[i], lo), hi);
    });
  }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    const float* x = args.inputs[0].data<float>();
    const float* g = args.grad_outputs[0].data<float>();
    float* dx = args.grad_inputs[0].data<float>();
    const float lo = lo_, hi = hi_;
    cpu::parallel_for(args.grad_inputs[0].numel(), 1, [&](int64_t begin, int64_t end) {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) dx[i] = x[i] >= lo && x[i] <= hi ? g[i] : 0.f;
    });
  }

 private:
  float lo_, hi_;
};

}  // namespace

std::unique_ptr<Kernel> make_exp_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Act::exp);
}
std::unique_ptr<Kernel> make_clamp_kernel(CpuContext&, const KernelSpec& spec) {
  return std::make_unique<ClampKernel>(spec);
}
std::unique_ptr<Kernel> make_relu_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Act::relu);
}
std::unique_ptr<Kernel> make_tanh_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Act::tanh);
}
std::unique_ptr<Kernel> make_sigmoid_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Act::sigmoid);
}
std::unique_ptr<Kernel> make_relu6_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Act::relu6);
}
std::unique_ptr<Kernel> make_hardswish_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Act::hardswish);
}
std::unique_ptr<Kernel> make_hardsigmoid_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Act::hardsigmoid);
}
std::unique_ptr<Kernel> make_silu_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Act::silu);
}
std::unique_ptr<Kernel> make_mish_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<ActivationKernel>(ctx, spec, Act::mish);
}
std::unique_ptr<Kernel> make_gelu_kernel(CpuContext& ctx, const KernelSpec& spec) {
  const std::string& approximate = spec.attrs->get_string("approximate");
  if (approximate != "none" && approximate != "tanh")
    throw UserError("gelu: approximate '" + approximate + "' is not one of none, tanh");
  return std::make_unique<ActivationKernel>(ctx, spec, approximate == "tanh" ? Act::gelu_tanh : Act::gelu_erf);
}

}  // namespace tandem
