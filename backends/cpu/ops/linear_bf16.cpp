// linear in bf16 (precision: bf16 on a CPU with avx512_bf16): y [M, N] = x [M, K] W^T + b
// with x and W rounded to bf16 (round to nearest even, as torch.autocast casts them), the
// products accumulated in fp32, bias and y fp32. The layers around it see fp32 as ever.
//
// The weight's bf16 forms are derived from the fp32 master and kept while params_version
// and the weight's storage hold (DerivedParams), so that only a changed weight is cast:
// - plain: W [N, K] cast to bf16 as it is; training's forward reads it (as [K, N]) and
//   backward-data reads it as [N, K], so one cast per optimizer step serves both. For a
//   weight in host memory it is the copy the weight's storage keeps, which the host's
//   optimizer rewrites as it updates the weight: then training casts nothing (Note [a
//   weight's bf16 copy] in core/bf16_copy.h);
// - packed: W reordered into the bf16 layout the forward matmul prefers (format any);
//   inference reads it, made when one version of the weight serves a second forward (as
//   the fp32 kernel decides: linear.cpp).
// Backward, with dy cast to bf16 once for both products:
//   dx [M, K]  = dy W          (assigned, fp32)
//   dW [N, K] += dy^T x        (accumulated in fp32: a sum post-op on the fp32 gradient)
//   db [N]    += sum_m dy[m]   (fp32, from the fp32 dy)
// x's bf16 copy from forward is reused when backward is given the same x storage (the
// executor keeps x unchanged between a forward and its backward).
#include <algorithm>
#include <optional>

#include "backends/cpu/ops/bf16_cast.h"
#include "backends/cpu/ops/derived_params.h"
#include "backends/cpu/ops/dnnl_relayout.h"
#include "backends/cpu/ops/linear_backward.h"
#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"
#include "backends/linear_plan.h"

namespace tandem {
namespace {

using dnnl::memory;
using Relayout = cpu::Relayout;

class LinearBf16Kernel final : public Kernel {
 public:
  LinearBf16Kernel(CpuContext& ctx, const KernelSpec& spec) : ctx_(ctx) {
    const LinearPlan plan = plan_linear(spec);
    has_bias_ = plan.has_bias;
    m_ = plan.m, n_ = plan.n, k_ = plan.k;
    key_ = cpu::spec_key(spec);
    std::optional<cpu::ScopedMaxThreads> one_thread;
    if (m_ * n_ * k_ <= cpu::kSingleThreadMaxFlops) one_thread.emplace(1);
    make_forward();
    make_backward();
  }

  void forward(const KernelArgs& args) override {
    const float* x = args.inputs[0].data<float>();
    if (m_ == 0 || n_ == 0) return;
    last_x_ = x;
    const void* x16 = x_in_.cast(x);
    const std::span<const Tensor> weight = args.params.first(1);
    ForwardCall* call = &packed_call_;
    if (packed_for_.current(args.params_version, weight)) {
      ++uses_;
    } else if (!plain_for_.current(args.params_version, weight) && uses_ == 1) {
      // a new version after a single forward of the last: training; cast the weight as it is
      cast_plain(args.params_version, weight);
      packed_for_.invalidate();
      call = &plain_call_;
    } else {
      // a first forward, a version read a second time, or one after a version used many times
      const bool again = plain_for_.current(args.params_version, weight);
      packed_w_ = w_packed_in_.read(args.params[0].data<float>());
      packed_for_.mark(args.params_version, weight);
      uses_ = again ? 2 : 1;
    }
    call->run(ctx_, x16, call == &plain_call_ ? plain_w_ : packed_w_, has_bias_ ? args.params[1].data<float>() : nullptr,
              args.outputs[0].data<float>());
  }

  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    const float* x = args.inputs[0].data<float>();
    const float* dy = args.grad_outputs[0].data<float>();
    float* dx = args.grad_inputs[0].defined() ? args.grad_inputs[0].data<float>() : nullptr;
    float* dw = args.grad_params[0].defined() ? args.grad_params[0].data<float>() : nullptr;
    float* db = has_bias_ && args.grad_params[1].defined() ? args.grad_params[1].data<float>() : nullptr;
    if (m_ == 0) return;
    if (n_ == 0) {  // y is empty: dx is zeros, nothing to accumulate
      if (dx) std::fill(dx, dx + m_ * k_, 0.f);
      return;
    }
    if (db) cpu::linear_bias_backward(dy, db, m_, n_);
    if (!dx && !dw) return;
    const void* dy16 = dy_in_.cast(dy);
    if (dx) {
      const std::span<const Tensor> weight = args.params.first(1);
      if (!plain_for_.current(args.params_version, weight)) cast_plain(args.params_version, weight);
      backward_.data(dy16, plain_w_, dx);
    }
    if (dw) backward_.weights(dy16, x == last_x_ ? x_in_.last() : x_in_.cast(x), dw);
  }

 private:
  /// A forward matmul y = x16 W16^T (+ b), every argument bound per call.
  struct ForwardCall {
    cpu::DnnlCall call;
    size_t src = 0, weight = 0, dst = 0, bias = 0;
    void run(CpuContext& ctx, const void* x16, const void* w16, const float* b, float* y) {
      call.set(src, x16);
      call.set(weight, w16);
      call.set(dst, y);
      if (b) call.set(bias, b);
      call.run(ctx);
    }
  };

  static constexpr auto kF32 = memory::data_type::f32;
  static constexpr auto kBf16 = memory::data_type::bf16;

  /// Builds `out` reading the weight as `w_md` ([K, N] in bf16), cached under `key`.
  dnnl::matmul::primitive_desc make_forward_call(ForwardCall& out, const memory::desc& w_md, const std::string& key) {
    dnnl::engine& eng = ctx_.engine();
    memory::desc src_md({m_, k_}, kBf16, memory::format_tag::ab);
    memory::desc bias_md({1, n_}, kF32, memory::format_tag::ab);
    memory::desc dst_md({m_, n_}, kF32, memory::format_tag::ab);
    auto desc = has_bias_ ? dnnl::matmul::desc(src_md, w_md, bias_md, dst_md) : dnnl::matmul::desc(src_md, w_md, dst_md);
    dnnl::matmul::primitive_desc pd(desc, user_scratchpad_attr(), eng);
    out.call = cpu::DnnlCall(ctx_.cached_primitive(key, [&] { return dnnl::matmul(pd); }));
    out.src = out.call.bind(DNNL_ARG_SRC, src_md, eng);
    out.weight = out.call.bind(DNNL_ARG_WEIGHTS, pd.weights_desc(), eng);
    out.dst = out.call.bind(DNNL_ARG_DST, dst_md, eng);
    if (has_bias_) out.bias = out.call.bind(DNNL_ARG_BIAS, bias_md, eng);
    return pd;
  }

  void make_forward() {
    x_in_ = cpu::Bf16Cast(ctx_.engine(), m_ * k_);
    // packed: the layout the primitive prefers, filled from the fp32 weight seen as [K, N]
    const dnnl::matmul::primitive_desc pd =
        make_forward_call(packed_call_, memory::desc({k_, n_}, kBf16, memory::format_tag::any), key_);
    w_packed_in_ = Relayout(ctx_, key_ + "#w_to_packed_bf16", memory::desc({k_, n_}, kF32, memory::format_tag::ba),
                            pd.weights_desc(), Relayout::Kind::input);
    // plain: [N, K] row-major in bf16, read by the forward as [K, N]
    make_forward_call(plain_call_, memory::desc({k_, n_}, kBf16, memory::format_tag::ba), key_ + "#plain_weight");
  }

  /// dx = dy16 [M, N] @ W16 [N, K]; dW += dy16^T [N, M] @ x16 [M, K] (linear_backward.h).
  void make_backward() {
    dy_in_ = cpu::Bf16Cast(ctx_.engine(), m_ * n_);
    backward_ = cpu::LinearBackwardMatmuls(ctx_, key_, m_, n_, k_, kBf16);
  }

  /// plain_w_ := the weight of `version` in bf16, as it is: the copy its storage keeps when
  /// the weight is in host memory (the optimizer may have written it already), else this
  /// kernel's own cast.
  void cast_plain(uint64_t version, std::span<const Tensor> weight) {
    plain_w_ = cpu::kept_bf16_weight(weight[0], version);
    if (plain_w_ == nullptr) {
      if (!w_plain_in_.allocated()) w_plain_in_ = cpu::Bf16Cast(ctx_.engine(), n_ * k_);
      plain_w_ = w_plain_in_.cast(weight[0].data<float>());
    }
    plain_for_.mark(version, weight);
  }

  CpuContext& ctx_;
  bool has_bias_ = true;
  int64_t m_ = 0, n_ = 0, k_ = 0;
  std::string key_;  // the primitive cache's key of this spec (precision included)
  ForwardCall packed_call_, plain_call_;
  cpu::Bf16Cast x_in_, dy_in_;
  cpu::Bf16Cast w_plain_in_;  // the plain weight of a weight without a kept copy, made when needed
  Relayout w_packed_in_;  // f32 [K, N] -> the forward's bf16 layout, a oneDNN reorder
  cpu::LinearBackwardMatmuls backward_;
  const void* packed_w_ = nullptr;  // w_packed_in_'s buffer, once filled
  const void* plain_w_ = nullptr;   // w_plain_in_'s buffer, once filled
  cpu::DerivedParams packed_for_;   // what packed_w_ was made from
  cpu::DerivedParams plain_for_;    // what plain_w_ was made from
  int64_t uses_ = 0;                // forwards that read the current packed version
  const float* last_x_ = nullptr;   // the x whose bf16 copy x_in_ holds
};

}  // namespace

std::unique_ptr<Kernel> make_linear_bf16_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<LinearBf16Kernel>(ctx, spec);
}

}  // namespace tandem
