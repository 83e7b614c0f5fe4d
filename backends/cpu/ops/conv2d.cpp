// conv2d: x [N, C, H, W] (or unbatched [C, H, W], run as N = 1), weight
// [O, C/groups, kh, kw], bias [O] -> y [N, O, OH, OW], torch.nn.Conv2d's cross-correlation.
//
// All three oneDNN convolutions (forward, backward data, backward weights) are built at
// compile time with format_tag::any for src, weights and dst, so that oneDNN picks its
// fastest (blocked) layouts; Relayout moves tensors between those and Tandem's plain
// NCHW / OIHW, and does nothing where the layouts already agree. The forward keeps the
// reordered weight until params_version or the weight's storage changes (as linear
// does). Small problems build single-threaded primitives (see kSingleThreadMaxFlops).
//
// Backward, with the weight as given in args; the weight reordered for backward-data's
// layout is kept, like the forward's, while the forward's params_version (which backward
// is told) and the weight's storage hold, so a training step reorders it once:
//   dx  = conv_backward_data(dy, W)        (assigned)
//   dW += conv_backward_weights(x, dy)     (accumulated: reorder with a sum post-op)
//   db += sum over N, OH, OW of dy         (accumulated)
// It reads x, not y.
//
// In bf16 (precision: bf16 on a CPU with avx512_bf16) the primitives read x, W and dy in
// bf16 and write y, dx and dW in fp32, accumulating in fp32: the relayouts above cast on
// the way in (the weight's bf16 copies kept as the fp32 ones are), so the layers around
// see fp32 as ever and the gradient is accumulated in fp32.
#include <optional>

#include "backends/cpu/cpu_precision.h"
#include "backends/cpu/ops/derived_params.h"
#include "backends/cpu/ops/dnnl_relayout.h"
#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"
#include "graph/ops/window2d.h"

namespace tandem {
namespace {

using dnnl::memory;
using Relayout = cpu::Relayout;

class Conv2dKernel final : public Kernel {
 public:
  Conv2dKernel(CpuContext& ctx, const KernelSpec& spec) : ctx_(ctx) {
    const Attributes& a = *spec.attrs;
    const Shape& x = spec.inputs.at(0).shape;
    const Shape& y = spec.outputs.at(0).shape;
    const Shape& w = spec.params.at(0).shape;
    TANDEM_ASSERT(x.size() == 3 || x.size() == 4, "conv2d: input must be [N, C, H, W] or [C, H, W]");
    has_bias_ = a.get_bool("bias");
    TANDEM_ASSERT(spec.params.size() == (has_bias_ ? 2u : 1u), "conv2d: wrong parameter count");
    const int64_t n = x.size() == 4 ? x[0] : 1, c = x[x.size() - 3], o = w[0];
    groups_ = a.get_int("groups");
    const Window2d win = conv2d_window(a);
    const std::array<int64_t, 2> in_hw{x[x.size() - 2], x[x.size() - 1]};
    TANDEM_ASSERT(win.output_size(in_hw) == (std::array<int64_t, 2>{y[y.size() - 2], y[y.size() - 1]}),
                  "conv2d: output shape disagrees with the schema");
    memory::dims src_dims{n, c, in_hw[0], in_hw[1]}, dst_dims{n, o, y[y.size() - 2], y[y.size() - 1]};
    // torch's [O, C/g, kh, kw] is oneDNN's goihw [g, O/g, C/g, kh, kw] in the same memory
    memory::dims w_dims = groups_ == 1 ? memory::dims{o, w[1], w[2], w[3]}
                                       : memory::dims{groups_, o / groups_, w[1], w[2], w[3]};
    const auto f32 = memory::data_type::f32;
    // what the primitives read x, W and dy in; they write y, dx and dW in fp32 either way
    const auto low = cpu::kernel_precision(spec).precision == Precision::bf16 ? memory::data_type::bf16 : f32;
    const auto any = memory::format_tag::any;
    user_src_ = memory::desc(src_dims, f32, memory::format_tag::nchw);
    user_dst_ = memory::desc(dst_dims, f32, memory::format_tag::nchw);
    user_w_ = memory::desc(w_dims, f32, groups_ == 1 ? memory::format_tag::oihw : memory::format_tag::goihw);
    memory::desc bias_md({o}, f32, memory::format_tag::x);
    memory::desc src_any(src_dims, low, any), dst_any(dst_dims, f32, any), w_any(w_dims, low, any);
    memory::desc dx_any(src_dims, f32, any), dy_any(dst_dims, low, any), dw_any(w_dims, f32, any);
    memory::dims strides{win.stride[0], win.stride[1]};
    memory::dims dilates{win.dilation[0] - 1, win.dilation[1] - 1};  // oneDNN counts the gaps
    memory::dims pad_l{win.pad_l[0], win.pad_l[1]}, pad_r{win.pad_r[0], win.pad_r[1]};

    const int64_t flops = n * o * dst_dims[2] * dst_dims[3] * (c / groups_) * w[2] * w[3];
    std::optional<cpu::ScopedMaxThreads> one_thread;
    if (flops <= cpu::kSingleThreadMaxFlops) one_thread.emplace(1);
    dnnl::engine& eng = ctx_.engine();
    const std::string key = cpu::spec_key(spec);
    const auto alg = dnnl::algorithm::convolution_direct;

    // forward
    auto fwd_desc = has_bias_ ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src_any, w_any,
                                                                 bias_md, dst_any, strides, dilates, pad_l, pad_r)
                              : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src_any, w_any,
                                                                 dst_any, strides, dilates, pad_l, pad_r);
    dnnl::convolution_forward::primitive_desc fwd_pd(fwd_desc, user_scratchpad_attr(), eng);
    fwd_ = cpu::DnnlCall(ctx_.cached_primitive(key, [&] { return dnnl::convolution_forward(fwd_pd); }));
    fwd_src_ = fwd_.bind(DNNL_ARG_SRC, fwd_pd.src_desc(), eng);
    fwd_dst_ = fwd_.bind(DNNL_ARG_DST, fwd_pd.dst_desc(), eng);
    fwd_w_ = fwd_.bind(DNNL_ARG_WEIGHTS, fwd_pd.weights_desc(), eng);
    if (has_bias_) fwd_bias_ = fwd_.bind(DNNL_ARG_BIAS, bias_md, eng);
    src_in_ = Relayout(ctx_, key + "#src", user_src_, fwd_pd.src_desc(), Relayout::Kind::input);
    dst_out_ = Relayout(ctx_, key + "#dst", user_dst_, fwd_pd.dst_desc(), Relayout::Kind::output);
    w_in_ = Relayout(ctx_, key + "#w", user_w_, fwd_pd.weights_desc(), Relayout::Kind::input);

    // backward data
    dnnl::convolution_backward_data::primitive_desc data_pd(
        dnnl::convolution_backward_data::desc(alg, dx_any, w_any, dy_any, strides, dilates, pad_l, pad_r),
        user_scratchpad_attr(), eng, fwd_pd);
    bwd_data_ = cpu::DnnlCall(ctx_.cached_primitive(key + "#bwd_data", [&] {
      return dnnl::convolution_backward_data(data_pd);
    }));
    data_dy_ = bwd_data_.bind(DNNL_ARG_DIFF_DST, data_pd.diff_dst_desc(), eng);
    data_w_ = bwd_data_.bind(DNNL_ARG_WEIGHTS, data_pd.weights_desc(), eng);
    data_dx_ = bwd_data_.bind(DNNL_ARG_DIFF_SRC, data_pd.diff_src_desc(), eng);
    data_dy_in_ = Relayout(ctx_, key + "#data_dy", user_dst_, data_pd.diff_dst_desc(), Relayout::Kind::input);
    data_w_in_ = Relayout(ctx_, key + "#data_w", user_w_, data_pd.weights_desc(), Relayout::Kind::input);
    data_dx_out_ = Relayout(ctx_, key + "#data_dx", user_src_, data_pd.diff_src_desc(), Relayout::Kind::output);

    // backward weights: the bias gradient comes out with it, into a buffer we add from
    auto wdesc = has_bias_ ? dnnl::convolution_backward_weights::desc(alg, src_any, dw_any, bias_md, dy_any, strides,
                                                                       dilates, pad_l, pad_r)
                           : dnnl::convolution_backward_weights::desc(alg, src_any, dw_any, dy_any, strides, dilates,
                                                                       pad_l, pad_r);
    dnnl::convolution_backward_weights::primitive_desc weights_pd(wdesc, user_scratchpad_attr(), eng, fwd_pd);
    bwd_weights_ = cpu::DnnlCall(ctx_.cached_primitive(key + "#bwd_weights", [&] {
      return dnnl::convolution_backward_weights(weights_pd);
    }));
    weights_x_ = bwd_weights_.bind(DNNL_ARG_SRC, weights_pd.src_desc(), eng);
    weights_dy_ = bwd_weights_.bind(DNNL_ARG_DIFF_DST, weights_pd.diff_dst_desc(), eng);
    weights_dw_ = bwd_weights_.bind(DNNL_ARG_DIFF_WEIGHTS, weights_pd.diff_weights_desc(), eng);
    if (has_bias_) {
      db_scratch_.resize(static_cast<size_t>(o));
      bwd_weights_.bind(DNNL_ARG_DIFF_BIAS, memory(bias_md, eng, db_scratch_.data()));
    }
    weights_x_in_ = Relayout(ctx_, key + "#weights_x", user_src_, weights_pd.src_desc(), Relayout::Kind::input);
    // Note [layouts read again]: backward-weights reads x and dy in layouts that forward and
    // backward-data have usually just made (oneDNN picks the same blocking for all three):
    // reordering them again cost a training step of resnet18 two activation-sized reorders
    // a convolution.
    x_from_forward_ = src_in_.needed() && weights_pd.src_desc() == fwd_pd.src_desc();
    dy_from_data_ = data_dy_in_.needed() && weights_pd.diff_dst_desc() == data_pd.diff_dst_desc();
    weights_dy_in_ =
        Relayout(ctx_, key + "#weights_dy", user_dst_, weights_pd.diff_dst_desc(), Relayout::Kind::input);
    weights_dw_out_ =
        Relayout(ctx_, key + "#weights_dw", user_w_, weights_pd.diff_weights_desc(), Relayout::Kind::accumulate);
  }

  void forward(const KernelArgs& args) override {
    const float* w = args.params[0].data<float>();
    if (w_in_.needed()) {
      if (!weight_ready_ || args.params_version != weight_version_ || w != weight_source_) {
        packed_w_ = w_in_.read(w);
        weight_ready_ = true;
        weight_version_ = args.params_version;
        weight_source_ = w;
      }
      fwd_.set(fwd_w_, packed_w_);
    } else {
      fwd_.set(fwd_w_, w);
    }
    if (has_bias_) fwd_.set(fwd_bias_, args.params[1].data<float>());
    forward_src_ = args.inputs[0].data<float>();
    fwd_.set(fwd_src_, src_in_.read(forward_src_));
    float* y = args.outputs[0].data<float>();
    fwd_.set(fwd_dst_, dst_out_.target(y));
    fwd_.run(ctx_);
    dst_out_.finish(y);
  }

  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    const float* dy = args.grad_outputs[0].data<float>();
    float* dx = args.grad_inputs[0].defined() ? args.grad_inputs[0].data<float>() : nullptr;
    float* dw = args.grad_params[0].defined() ? args.grad_params[0].data<float>() : nullptr;
    float* db = has_bias_ && args.grad_params[1].defined() ? args.grad_params[1].data<float>() : nullptr;
    if (dx) {
      bwd_data_.set(data_dy_, data_dy_in_.read(dy));
      if (!data_w_packed_for_.current(args.params_version, args.params)) {
        data_packed_w_ = data_w_in_.read(args.params[0].data<float>());
        data_w_packed_for_.mark(args.params_version, args.params);
      }
      bwd_data_.set(data_w_, data_packed_w_);
      bwd_data_.set(data_dx_, data_dx_out_.target(dx));
      bwd_data_.run(ctx_);
      data_dx_out_.finish(dx);
    }
    if (dw || db) {
      // x as the last forward laid it out, when that forward read this x (a training step
      // keeps its input until this backward; Note [layouts read again])
      const float* x = args.inputs[0].data<float>();
      bwd_weights_.set(weights_x_, x_from_forward_ && forward_src_ == x ? src_in_.last_read() : weights_x_in_.read(x));
      bwd_weights_.set(weights_dy_, dx && dy_from_data_ ? data_dy_in_.last_read() : weights_dy_in_.read(dy));
      // without a dW to accumulate into, the primitive still writes its buffer
      bwd_weights_.set(weights_dw_, weights_dw_out_.target(nullptr));
      bwd_weights_.run(ctx_);
      if (dw) weights_dw_out_.finish(dw);
      if (db)
        for (size_t i = 0; i < db_scratch_.size(); ++i) db[i] += db_scratch_[i];
    }
    forward_src_ = nullptr;  // a second backward lays x out anew
  }

 private:
  CpuContext& ctx_;
  bool has_bias_ = true;
  int64_t groups_ = 1;
  memory::desc user_src_, user_dst_, user_w_;
  cpu::DnnlCall fwd_, bwd_data_, bwd_weights_;
  size_t fwd_src_ = 0, fwd_dst_ = 0, fwd_w_ = 0, fwd_bias_ = 0;
  size_t data_dy_ = 0, data_w_ = 0, data_dx_ = 0;
  size_t weights_x_ = 0, weights_dy_ = 0, weights_dw_ = 0;
  Relayout src_in_, dst_out_, w_in_;
  Relayout data_dy_in_, data_w_in_, data_dx_out_;
  Relayout weights_x_in_, weights_dy_in_, weights_dw_out_;
  std::vector<float> db_scratch_;
  bool x_from_forward_ = false, dy_from_data_ = false;
  const float* forward_src_ = nullptr;  // the x the last forward laid out in src_in_'s buffer
  const void* packed_w_ = nullptr;
  bool weight_ready_ = false;
  uint64_t weight_version_ = 0;
  const float* weight_source_ = nullptr;
  cpu::DerivedParams data_w_packed_for_;  // what data_packed_w_ holds
  const void* data_packed_w_ = nullptr;
};

}  // namespace

std::unique_ptr<Kernel> make_conv2d_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<Conv2dKernel>(ctx, spec);
}

}  // namespace tandem
