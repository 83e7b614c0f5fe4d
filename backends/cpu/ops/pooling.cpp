// max_pool2d and avg_pool2d: x [N, C, H, W] (or [C, H, W]) -> y [N, C, OH, OW], torch's
// MaxPool2d / AvgPool2d, through oneDNN's pooling_v2 primitives in the ISA's blocked
// layout (nChw8c or nChw16c, backends/cpu/cpu_channel_block.h), x and y moved there and
// back by reorders. On the plain NCHW layout oneDNN has only its simple_nchw kernel:
// resnet's 3x3 max pool at batch 8 (8 x 64 x 112 x 112) took 57 ms forward and 20 ms
// backward on 2 AVX2 cores, against 10 and 11 ms in nChw8c plus 4 ms of reorders each way
// (torch's own NCHW kernel: 28 ms forward). Where oneDNN has no jit kernel for the blocked
// layout either (it would pick its reference one), the kernel stays on NCHW.
// ceil_mode is a larger right padding (Window2d::effective_pad_r), which oneDNN ignores
// for max and for an average that excludes padding.
//
// max_pool2d keeps oneDNN's workspace (where each maximum came from) in the kernel: every
// forward writes it, in inference too, so that a backward can follow any forward
// (Model::backward also runs in eval mode); backward reads only dy and the workspace
// of the last forward, never x nor y.
//
// avg_pool2d with count_include_pad divides by the window clipped to the padded input
// (torch's rule). oneDNN's include_padding divides by the whole kernel, which differs
// only where ceil_mode adds a window that passes the padding; there the kernel uses
// exclude_padding and rescales each output position by (elements inside the input) /
// (torch's divisor), before the backward too. Backward reads only dy.
#include <algorithm>

#include "backends/cpu/cpu_channel_block.h"
#include "backends/cpu/ops/dnnl_relayout.h"
#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"
#include "graph/ops/window2d.h"

namespace tandem {
namespace {

using dnnl::memory;

class Pool2dKernel final : public Kernel {
 public:
  Pool2dKernel(CpuContext& ctx, const KernelSpec& spec, bool is_max) : ctx_(ctx), is_max_(is_max) {
    const Attributes& a = *spec.attrs;
    const Shape& x = spec.inputs.at(0).shape;
    const Shape& y = spec.outputs.at(0).shape;
    TANDEM_ASSERT(x.size() == 3 || x.size() == 4, "pool2d: input must be [N, C, H, W] or [C, H, W]");
    const int64_t n = x.size() == 4 ? x[0] : 1, c = x[x.size() - 3];
    const Window2d win = pool2d_window(a);
    const std::array<int64_t, 2> in{x[x.size() - 2], x[x.size() - 1]};
    const std::array<int64_t, 2> out = win.output_size(in);
    TANDEM_ASSERT(out == (std::array<int64_t, 2>{y[y.size() - 2], y[y.size() - 1]}), "pool2d: output shape disagrees");
    const std::array<int64_t, 2> pad_r = win.effective_pad_r(in);
    dnnl::algorithm alg = dnnl::algorithm::pooling_max;
    if (!is_max) {
      const bool include_pad = a.get_bool("count_include_pad");
      alg = include_pad ? dnnl::algorithm::pooling_avg_include_padding : dnnl::algorithm::pooling_avg_exclude_padding;
      if (include_pad && pad_r != win.pad_r) make_divisor_scale(win, in, out, alg);
    }
    const auto f32 = memory::data_type::f32;
    const memory::dims x_dims{n, c, in[0], in[1]}, y_dims{n, c, out[0], out[1]};
    const memory::desc x_md(x_dims, f32, memory::format_tag::nchw), y_md(y_dims, f32, memory::format_tag::nchw);
    memory::dims strides{win.stride[0], win.stride[1]}, kernel{win.kernel[0], win.kernel[1]};
    memory::dims dilation{win.dilation[0] - 1, win.dilation[1] - 1};  // oneDNN counts the gaps
    memory::dims pl{win.pad_l[0], win.pad_l[1]}, pr{pad_r[0], pad_r[1]};
    dnnl::engine& eng = ctx_.engine();
    auto forward_pd = [&](memory::format_tag layout) {
      return dnnl::pooling_v2_forward::primitive_desc(
          dnnl::pooling_v2_forward::desc(dnnl::prop_kind::forward_training, alg, memory::desc(x_dims, f32, layout),
                                         memory::desc(y_dims, f32, layout), strides, kernel, dilation, pl, pr),
          user_scratchpad_attr(), eng);
    };
    dnnl::pooling_v2_forward::primitive_desc fwd_pd = forward_pd(cpu::blocked_activation_tag());
    if (cpu::is_reference_kernel(fwd_pd)) fwd_pd = forward_pd(memory::format_tag::nchw);
    const memory::desc src_md = fwd_pd.src_desc(), dst_md = fwd_pd.dst_desc();
    const std::string key = cpu::spec_key(spec) + (src_md == x_md ? "" : "#blocked");
    fwd_ = cpu::DnnlCall(ctx_.cached_primitive(key, [&] { return dnnl::pooling_v2_forward(fwd_pd); }));
    fwd_src_ = fwd_.bind(DNNL_ARG_SRC, src_md, eng);
    fwd_dst_ = fwd_.bind(DNNL_ARG_DST, dst_md, eng);
    dnnl::pooling_v2_backward::primitive_desc bwd_pd(
        dnnl::pooling_v2_backward::desc(alg, src_md, dst_md, strides, kernel, dilation, pl, pr), user_scratchpad_attr(), eng,
        fwd_pd);
    bwd_ = cpu::DnnlCall(ctx_.cached_primitive(key + "#bwd", [&] { return dnnl::pooling_v2_backward(bwd_pd); }));
    bwd_dy_ = bwd_.bind(DNNL_ARG_DIFF_DST, dst_md, eng);
    bwd_dx_ = bwd_.bind(DNNL_ARG_DIFF_SRC, src_md, eng);
    using Kind = cpu::Relayout::Kind;
    x_ = cpu::Relayout(ctx_, key + "#x", x_md, src_md, Kind::input);
    y_ = cpu::Relayout(ctx_, key + "#y", y_md, dst_md, Kind::output);
    dy_ = cpu::Relayout(ctx_, key + "#dy", y_md, dst_md, Kind::input);
    dx_ = cpu::Relayout(ctx_, key + "#dx", x_md, src_md, Kind::output);
    dx_.share_buffer(x_);  // backward needs neither x nor y: two buffers, not four
    dy_.share_buffer(y_);
    if (is_max) {
      memory workspace(fwd_pd.workspace_desc(), eng);
      fwd_.bind(DNNL_ARG_WORKSPACE, workspace);
      bwd_.bind(DNNL_ARG_WORKSPACE, workspace);
    }
    planes_ = n * c;
  }

  void forward(const KernelArgs& args) override {
    float* y = args.outputs[0].data<float>();
    fwd_.set(fwd_src_, x_.read(args.inputs[0].data<float>()));
    fwd_.set(fwd_dst_, y_.target(y));
    fwd_.run(ctx_);
    y_.finish(y);
    if (!scale_.empty()) apply_scale(y, y);
    has_workspace_ = true;
  }

  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    TANDEM_ASSERT(!is_max_ || has_workspace_, "max_pool2d: backward before any forward");
    const float* dy = args.grad_outputs[0].data<float>();
    if (!scale_.empty()) {
      scaled_dy_.resize(static_cast<size_t>(args.grad_outputs[0].numel()));
      apply_scale(dy, scaled_dy_.data());
      dy = scaled_dy_.data();
    }
    float* dx = args.grad_inputs[0].data<float>();
    bwd_.set(bwd_dy_, dy_.read(dy));
    bwd_.set(bwd_dx_, dx_.target(dx));
    bwd_.run(ctx_);
    dx_.finish(dx);
  }

 private:
  /// Per output position (oh, ow): oneDNN's exclude_padding divisor over torch's
  /// count_include_pad divisor, the window clipped to [-pad, size + pad).
  void make_divisor_scale(const Window2d& w, std::array<int64_t, 2> in, std::array<int64_t, 2> out,
                          dnnl::algorithm& alg) {
    alg = dnnl::algorithm::pooling_avg_exclude_padding;
    auto extent = [&](int d, int64_t o, bool padded) {
      int64_t start = o * w.stride[d] - w.pad_l[d], end = start + w.kernel[d];
      if (padded) return std::min(end, in[d] + w.pad_r[d]) - start;
      return std::min(end, in[d]) - std::max<int64_t>(start, 0);
    };
    scale_.resize(static_cast<size_t>(out[0] * out[1]));
    for (int64_t oh = 0; oh < out[0]; ++oh)
      for (int64_t ow = 0; ow < out[1]; ++ow)
        scale_[oh * out[1] + ow] = static_cast<float>(extent(0, oh, false) * extent(1, ow, false)) /
                                   static_cast<float>(extent(0, oh, true) * extent(1, ow, true));
  }

  void apply_scale(const float* from, float* to) const {
    const int64_t plane = static_cast<int64_t>(scale_.size());
    const float* s = scale_.data();
    cpu::parallel_for(planes_, plane, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
#pragma omp simd
        for (int64_t i = 0; i < plane; ++i) to[p * plane + i] = from[p * plane + i] * s[i];
      }
    });
  }

  CpuContext& ctx_;
  bool is_max_;
  int64_t planes_ = 0;
  cpu::DnnlCall fwd_, bwd_;
  size_t fwd_src_ = 0, fwd_dst_ = 0, bwd_dy_ = 0, bwd_dx_ = 0;
  cpu::Relayout x_, y_, dy_, dx_;  // NCHW <-> the primitives' layout; nothing where they agree
  bool has_workspace_ = false;
  std::vector<float> scale_;      // avg_pool2d's divisor correction; empty when none is needed
  std::vector<float> scaled_dy_;  // backward's dy * scale
};

}  // namespace

std::unique_ptr<Kernel> make_max_pool2d_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<Pool2dKernel>(ctx, spec, true);
}

std::unique_ptr<Kernel> make_avg_pool2d_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<Pool2dKernel>(ctx, spec, false);
}

}  // namespace tandem
