// linear: x [*, in], weight [out, in], bias [out] (if bias=true) -> y [*, out] = x W^T + b.
//
// Tiny layers (batch-1 latency) run a plain loop: oneDNN's per-call overhead (~0.25 us)
// is larger than the whole computation there. Larger ones run a oneDNN matmul on x
// viewed as [M, in], with the weight reordered once into the layout the primitive
// prefers (format_tag::any) and kept until params_version or the weight pointer changes.
// Training changes the weight after every forward, and then the reorder is a pass over the
// weight per step that buys nothing: a matmul on the weight as it is costs about the same
// as one on the reordered weight (1024 x 1024 at batch 128, 2 threads: 0.92 ms as it is,
// 0.69 ms reordered plus 0.29 ms to reorder). So a weight whose previous version served a
// single forward is read as it is; one used a second time (inference, evaluation) is
// reordered then, and kept while it holds.
//
// Backward, with x viewed as [M, in] = [M, K], weight [N, K], dy [M, N]:
//   dx [M, K]  = dy W          (assigned)
//   dW [N, K] += dy^T x        (accumulated: oneDNN sum post-op, or the loop's +=)
//   db [N]    += sum_m dy[m]   (accumulated)
// It needs x and the plain weight from args (never the packed copy of forward: the
// runtime may update the weight between forward and backward). Both oneDNN matmuls are
// built in the factory for the sizes where forward uses oneDNN; tiny layers loop.
#include <algorithm>
#include <cstring>
#include <optional>

#include "backends/cpu/cpu_precision.h"
#include "backends/cpu/ops/derived_params.h"
#include "backends/cpu/ops/linear_backward.h"
#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"
#include "backends/linear_plan.h"

namespace tandem {
namespace {

using dnnl::memory;

class LinearKernel final : public Kernel {
 public:
  LinearKernel(CpuContext& ctx, const KernelSpec& spec) : ctx_(ctx) {
    const LinearPlan plan = plan_linear(spec);
    has_bias_ = plan.has_bias;
    m_ = plan.m, n_ = plan.n, k_ = plan.k;
    use_loop_ = cpu::runs_as_fp32_loop(m_ * n_ * k_, k_);
    if (!use_loop_) {
      make_primitive(spec);
      backward_ = cpu::LinearBackwardMatmuls(ctx_, cpu::spec_key(spec), m_, n_, k_, memory::data_type::f32);
    }
  }

  void forward(const KernelArgs& args) override {
    const float* x = args.inputs[0].data<float>();
    const float* w = args.params[0].data<float>();
    const float* b = has_bias_ ? args.params[1].data<float>() : nullptr;
    float* y = args.outputs[0].data<float>();
    if (m_ == 0 || n_ == 0) return;
    if (use_loop_) return forward_loop(x, w, b, y);
    if (!reorder_.valid()) return matmul_.run(ctx_, x, w, b, y);  // it wants the weight as it is
    const std::span<const Tensor> weight = args.params.first(1);
    if (packed_.current(args.params_version, weight)) {
      ++uses_;
    } else if (!read_plain_.current(args.params_version, weight) && uses_ == 1) {
      // a new version after a single forward of the last: training; read the weight as it is
      read_plain_.mark(args.params_version, weight);
      packed_.invalidate();
      return plain_matmul().run(ctx_, x, w, b, y);
    } else {
      // a first forward, a version read a second time, or one after a version used many times
      const bool again = read_plain_.current(args.params_version, weight);
      reorder_.set(reorder_src_, w);
      reorder_.run(ctx_);
      packed_.mark(args.params_version, weight);
      read_plain_.invalidate();
      uses_ = again ? 2 : 1;
    }
    matmul_.run(ctx_, x, nullptr, b, y);
  }

  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    const float* x = args.inputs[0].data<float>();
    const float* w = args.params[0].data<float>();
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
    if (use_loop_) return backward_loop(x, w, dy, dx, dw);
    if (dx) backward_.data(dy, w, dx);
    if (dw) backward_.weights(dy, x, dw);
  }

 private:
  /// A forward matmul y = x W^T (+ b) with its bound slots.
  struct ForwardCall {
    cpu::DnnlCall call;
    size_t src = 0, dst = 0, bias = 0;
    std::optional<size_t> weight;  // none when bound to a reordered copy of the weight
    void run(CpuContext& ctx, const float* x, const float* w, const float* b, float* y) {
      if (weight) call.set(*weight, w);
      call.set(src, x);
      call.set(dst, y);
      if (b) call.set(bias, b);
      call.run(ctx);
    }
  };

  /// Makes `out` the forward matmul reading the weight as `w_md` says ([K, N]; format any:
  /// as the primitive prefers), cached under `key`, its input, output and bias bound; the
  /// caller binds the weight. Returns the primitive's description.
  dnnl::matmul::primitive_desc make_forward(ForwardCall& out, const memory::desc& w_md, const std::string& key) {
    dnnl::engine& eng = ctx_.engine();
    const auto f32 = memory::data_type::f32;
    memory::desc src_md({m_, k_}, f32, memory::format_tag::ab);
    memory::desc bias_md({1, n_}, f32, memory::format_tag::ab);
    memory::desc dst_md({m_, n_}, f32, memory::format_tag::ab);
    auto desc = has_bias_ ? dnnl::matmul::desc(src_md, w_md, bias_md, dst_md) : dnnl::matmul::desc(src_md, w_md, dst_md);
    std::optional<cpu::ScopedMaxThreads> one_thread;
    if (m_ * n_ * k_ <= cpu::kSingleThreadMaxFlops) one_thread.emplace(1);
    dnnl::matmul::primitive_desc pd(desc, user_scratchpad_attr(), eng);
    out.call = cpu::DnnlCall(ctx_.cached_primitive(key, [&] { return dnnl::matmul(pd); }));
    out.src = out.call.bind(DNNL_ARG_SRC, src_md, eng);
    out.dst = out.call.bind(DNNL_ARG_DST, dst_md, eng);
    if (has_bias_) out.bias = out.call.bind(DNNL_ARG_BIAS, bias_md, eng);
    return pd;
  }

  /// The weight as the user holds it, [N, K] row-major, seen as the matmul's [K, N].
  memory::desc plain_weight_md() const { return memory::desc({k_, n_}, memory::data_type::f32, memory::format_tag::ba); }

  /// The matmul that reads the weight as it is, made the first time training asks for it.
  ForwardCall& plain_matmul() {
    if (plain_.call.valid()) return plain_;
    make_forward(plain_, plain_weight_md(), key_ + "#plain_weight");
    plain_.weight = plain_.call.bind(DNNL_ARG_WEIGHTS, plain_weight_md(), ctx_.engine());
    return plain_;
  }

  void backward_loop(const float* x, const float* w, const float* dy, float* dx, float* dw) const {
    const int64_t m = m_, n = n_, k = k_;
    if (dx) {
      for (int64_t i = 0; i < m; ++i) {
        float* dxr = dx + i * k;
        std::fill(dxr, dxr + k, 0.f);
        for (int64_t o = 0; o < n; ++o) {
          const float g = dy[i * n + o];
          const float* wr = w + o * k;
#pragma omp simd
          for (int64_t j = 0; j < k; ++j) dxr[j] += g * wr[j];
        }
      }
    }
    if (dw) {
      for (int64_t i = 0; i < m; ++i) {
        const float* xr = x + i * k;
        for (int64_t o = 0; o < n; ++o) {
          const float g = dy[i * n + o];
          float* dwr = dw + o * k;
#pragma omp simd
          for (int64_t j = 0; j < k; ++j) dwr[j] += g * xr[j];
        }
      }
    }
  }

  void forward_loop(const float* x, const float* w, const float* b, float* y) const {
    const int64_t m = m_, n = n_, k = k_;
    cpu::parallel_for(m * n, k, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float* xr = x + (i / n) * k;
        const float* wr = w + (i % n) * k;
        float acc = 0.f;
#pragma omp simd reduction(+ : acc)
        for (int64_t j = 0; j < k; ++j) acc += xr[j] * wr[j];
        y[i] = b ? acc + b[i % n] : acc;
      }
    });
  }

  void make_primitive(const KernelSpec& spec) {
    dnnl::engine& eng = ctx_.engine();
    key_ = cpu::spec_key(spec);
    const memory::desc user_w_md = plain_weight_md();
    const dnnl::matmul::primitive_desc pd =
        make_forward(matmul_, memory::desc({k_, n_}, memory::data_type::f32, memory::format_tag::any), key_);
    if (pd.weights_desc() == user_w_md) {
      matmul_.weight = matmul_.call.bind(DNNL_ARG_WEIGHTS, user_w_md, eng);
      return;
    }
    // The primitive wants its own weight layout: own a buffer in it, filled by a reorder.
    memory packed(pd.weights_desc(), eng);
    matmul_.call.bind(DNNL_ARG_WEIGHTS, packed);
    std::optional<cpu::ScopedMaxThreads> one_thread;  // as the matmul it feeds
    if (m_ * n_ * k_ <= cpu::kSingleThreadMaxFlops) one_thread.emplace(1);
    dnnl::reorder::primitive_desc rpd(eng, user_w_md, eng, pd.weights_desc(), user_scratchpad_attr());
    reorder_ = cpu::DnnlCall(ctx_.cached_primitive(key_ + "#weight_reorder", [&] { return dnnl::reorder(rpd); }));
    reorder_src_ = reorder_.bind(DNNL_ARG_FROM, user_w_md, eng);
    reorder_.bind(DNNL_ARG_TO, packed);
  }

  CpuContext& ctx_;
  bool has_bias_ = true;
  bool use_loop_ = true;
  int64_t m_ = 0, n_ = 0, k_ = 0;
  std::string key_;  // the primitive cache's key of this spec
  ForwardCall matmul_;  // on the weight in the layout the primitive prefers
  ForwardCall plain_;   // on the weight as it is, when matmul_ wants it reordered (training)
  cpu::DnnlCall reorder_;
  cpu::LinearBackwardMatmuls backward_;
  size_t reorder_src_ = 0;
  cpu::DerivedParams packed_;      // what the reordered weight was made from
  cpu::DerivedParams read_plain_;  // the version the last forward read as it is
  int64_t uses_ = 0;               // forwards that read the current version
};

}  // namespace

std::unique_ptr<Kernel> make_linear_kernel(CpuContext& ctx, const KernelSpec& spec) {
  // bf16 where the layer asks for it and the CPU has it; a layer small enough for the
  // plain loop gains nothing from it and keeps fp32 (cpu::kernel_precision)
  if (cpu::kernel_precision(spec).precision == Precision::bf16) return make_linear_bf16_kernel(ctx, spec);
  return std::make_unique<LinearKernel>(ctx, spec);
}

}  // namespace tandem
