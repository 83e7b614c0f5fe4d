// batch_norm2d: x [N, C, H, W] -> y, each channel normalised, torch.nn.BatchNorm2d.
// Parameters in the schema's order: weight [C], bias [C] (affine), then the buffers
// running_mean [C], running_var [C], num_batches_tracked [] int64 (track_running_stats).
//
// Training forward (or always without running statistics): the batch's mean and biased
// variance over N, H, W (oneDNN forward_training writes them into the kernel's
// batch_mean_ / batch_var_), then, as torch, in place on the buffers:
//   num_batches_tracked += 1
//   f = momentum, or 1 / num_batches_tracked when momentum is null (cumulative average)
//   running_mean = (1 - f) running_mean + f mean
//   running_var  = (1 - f) running_var  + f var * M / (M - 1),   M = N H W (unbiased)
// Eval forward with running statistics: oneDNN's use_global_stats on the buffers.
//
// Backward: oneDNN's batch_normalization_backward, with the statistics the forward used:
// the batch's (kept by the last training forward) or the running ones (eval):
//   dx = assigned; dweight += sum(dy xhat); dbias += sum(dy) (from scratch buffers).
// It reads x but not y.
#include <cmath>

#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem {
namespace {

using dnnl::memory;
using Flags = dnnl::normalization_flags;

/// One forward and its backward, for one choice of statistics (batch or running).
struct BnPrimitives {
  cpu::DnnlCall fwd, bwd;
  size_t fwd_src = 0, fwd_dst = 0, fwd_mean = 0, fwd_var = 0, fwd_scale = 0, fwd_shift = 0;
  size_t bwd_src = 0, bwd_dy = 0, bwd_dx = 0, bwd_mean = 0, bwd_var = 0, bwd_scale = 0, bwd_shift = 0;
};

class BatchNormKernel final : public Kernel {
 public:
  BatchNormKernel(CpuContext& ctx, const KernelSpec& spec) : ctx_(ctx) {
    const Attributes& a = *spec.attrs;
    const Shape& x = spec.inputs.at(0).shape;
    TANDEM_ASSERT(x.size() == 4, "batch_norm2d: input must be [N, C, H, W]");
    affine_ = a.get_bool("affine");
    tracks_ = a.get_bool("track_running_stats");
    TANDEM_ASSERT(spec.params.size() == (affine_ ? 2u : 0u) + (tracks_ ? 3u : 0u), "batch_norm2d: wrong parameter count");
    eps_ = static_cast<float>(a.get_float("eps"));
    if (!a.is_null("momentum")) momentum_ = a.get_float("momentum");
    channels_ = x[1];
    per_channel_ = x[0] * x[2] * x[3];
    batch_mean_.resize(static_cast<size_t>(channels_));
    batch_var_.resize(static_cast<size_t>(channels_));
    dscale_.resize(static_cast<size_t>(channels_));
    dshift_.resize(static_cast<size_t>(channels_));
    if (!affine_) {  // oneDNN's scale and shift stay in use: weight 1, bias 0
      ones_.assign(static_cast<size_t>(channels_), 1.f);
      zeros_.assign(static_cast<size_t>(channels_), 0.f);
    }
    const std::string key = cpu::spec_key(spec);
    batch_ = make(key + "#batch", x, false);
    if (tracks_) running_ = make(key + "#running", x, true);
  }

  void forward(const KernelArgs& args) override {
    const bool batch_stats = args.training || !tracks_;
    BnPrimitives& p = batch_stats ? batch_ : running_;
    p.fwd.set(p.fwd_src, args.inputs[0].data<float>());
    p.fwd.set(p.fwd_dst, args.outputs[0].data<float>());
    p.fwd.set(p.fwd_scale, weight(args.params));
    p.fwd.set(p.fwd_shift, affine_ ? args.params[1].data<float>() : zeros_.data());
    if (batch_stats) {
      if (args.training && per_channel_ < 2)
        throw UserError("batch_norm2d: training needs more than one value per channel; the input " +
                        shape_str(args.inputs[0].shape()) + " has " + std::to_string(per_channel_));
      p.fwd.set(p.fwd_mean, batch_mean_.data());
      p.fwd.set(p.fwd_var, batch_var_.data());
    } else {
      p.fwd.set(p.fwd_mean, args.params[buffer_index()].data<float>());
      p.fwd.set(p.fwd_var, args.params[buffer_index() + 1].data<float>());
    }
    p.fwd.run(ctx_);
    if (args.training && tracks_) update_running_stats(args.params);
  }

  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    const bool batch_stats = args.training || !tracks_;
    BnPrimitives& p = batch_stats ? batch_ : running_;
    float* dx = args.grad_inputs[0].defined() ? args.grad_inputs[0].data<float>() : nullptr;
    float* dw = affine_ && args.grad_params[0].defined() ? args.grad_params[0].data<float>() : nullptr;
    float* db = affine_ && args.grad_params[1].defined() ? args.grad_params[1].data<float>() : nullptr;
    if (!dx && !dw && !db) return;
    scratch_dx_.resize(dx ? 0 : static_cast<size_t>(args.inputs[0].numel()));  // the primitive writes dx always
    p.bwd.set(p.bwd_src, args.inputs[0].data<float>());
    p.bwd.set(p.bwd_dy, args.grad_outputs[0].data<float>());
    p.bwd.set(p.bwd_dx, dx ? dx : scratch_dx_.data());
    p.bwd.set(p.bwd_scale, weight(args.params));
    p.bwd.set(p.bwd_shift, affine_ ? args.params[1].data<float>() : zeros_.data());
    if (batch_stats) {
      p.bwd.set(p.bwd_mean, batch_mean_.data());
      p.bwd.set(p.bwd_var, batch_var_.data());
    } else {
      p.bwd.set(p.bwd_mean, args.params[buffer_index()].data<float>());
      p.bwd.set(p.bwd_var, args.params[buffer_index() + 1].data<float>());
    }
    p.bwd.run(ctx_);
    for (int64_t c = 0; c < channels_; ++c) {
      if (dw) dw[c] += dscale_[c];
      if (db) db[c] += dshift_[c];
    }
  }

 private:
  BnPrimitives make(const std::string& key, const Shape& x, bool global_stats) {
    dnnl::engine& eng = ctx_.engine();
    memory::desc data_md({x[0], x[1], x[2], x[3]}, memory::data_type::f32, memory::format_tag::nchw);
    memory::desc stat_md({channels_}, memory::data_type::f32, memory::format_tag::x);
    Flags flags = Flags::use_scale | Flags::use_shift;
    if (global_stats) flags = flags | Flags::use_global_stats;
    auto prop = global_stats ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training;
    std::optional<cpu::ScopedMaxThreads> one_thread;
    if (x[0] * x[1] * x[2] * x[3] * 8 <= cpu::kSingleThreadMaxFlops) one_thread.emplace(1);
    dnnl::batch_normalization_forward::primitive_desc fwd_pd(
        dnnl::batch_normalization_forward::desc(prop, data_md, eps_, flags), user_scratchpad_attr(), eng);
    BnPrimitives p;
    p.fwd = cpu::DnnlCall(ctx_.cached_primitive(key, [&] { return dnnl::batch_normalization_forward(fwd_pd); }));
    p.fwd_src = p.fwd.bind(DNNL_ARG_SRC, data_md, eng);
    p.fwd_dst = p.fwd.bind(DNNL_ARG_DST, data_md, eng);
    p.fwd_mean = p.fwd.bind(DNNL_ARG_MEAN, stat_md, eng);
    p.fwd_var = p.fwd.bind(DNNL_ARG_VARIANCE, stat_md, eng);
    p.fwd_scale = p.fwd.bind(DNNL_ARG_SCALE, stat_md, eng);
    p.fwd_shift = p.fwd.bind(DNNL_ARG_SHIFT, stat_md, eng);
    dnnl::batch_normalization_backward::primitive_desc bwd_pd(
        dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, data_md, data_md, eps_, flags),
        user_scratchpad_attr(), eng, fwd_pd);
    p.bwd = cpu::DnnlCall(ctx_.cached_primitive(key + "#bwd", [&] { return dnnl::batch_normalization_backward(bwd_pd); }));
    p.bwd_src = p.bwd.bind(DNNL_ARG_SRC, data_md, eng);
    p.bwd_dy = p.bwd.bind(DNNL_ARG_DIFF_DST, data_md, eng);
    p.bwd_dx = p.bwd.bind(DNNL_ARG_DIFF_SRC, data_md, eng);
    p.bwd_mean = p.bwd.bind(DNNL_ARG_MEAN, stat_md, eng);
    p.bwd_var = p.bwd.bind(DNNL_ARG_VARIANCE, stat_md, eng);
    p.bwd_scale = p.bwd.bind(DNNL_ARG_SCALE, stat_md, eng);
    p.bwd_shift = p.bwd.bind(DNNL_ARG_SHIFT, stat_md, eng);  // not read, but oneDNN 2.6 checks it is given
    p.bwd.bind(DNNL_ARG_DIFF_SCALE, memory(stat_md, eng, dscale_.data()));
    p.bwd.bind(DNNL_ARG_DIFF_SHIFT, memory(stat_md, eng, dshift_.data()));
    return p;
  }

  size_t buffer_index() const { return affine_ ? 2 : 0; }
  const float* weight(std::span<const Tensor> params) const {
    return affine_ ? params[0].data<float>() : ones_.data();
  }

  void update_running_stats(std::span<const Tensor> params) {
    float* mean = params[buffer_index()].data<float>();
    float* var = params[buffer_index() + 1].data<float>();
    int64_t& tracked = *params[buffer_index() + 2].data<int64_t>();
    ++tracked;
    const double f = momentum_ ? *momentum_ : 1.0 / static_cast<double>(tracked);
    const double unbias = static_cast<double>(per_channel_) / static_cast<double>(per_channel_ - 1);
    for (int64_t c = 0; c < channels_; ++c) {
      mean[c] = static_cast<float>((1 - f) * mean[c] + f * batch_mean_[c]);
      var[c] = static_cast<float>((1 - f) * var[c] + f * batch_var_[c] * unbias);
    }
  }

  CpuContext& ctx_;
  bool affine_ = true, tracks_ = true;
  float eps_ = 1e-5f;
  std::optional<double> momentum_;  // nullopt: cumulative average
  int64_t channels_ = 0, per_channel_ = 0;
  BnPrimitives batch_, running_;
  std::vector<float> batch_mean_, batch_var_;  // the last training forward's statistics
  std::vector<float> dscale_, dshift_;         // backward's parameter gradients, before +=
  std::vector<float> ones_, zeros_;            // scale and shift when not affine
  std::vector<float> scratch_dx_;              // dx when the input needs no gradient
};

}  // namespace

std::unique_ptr<Kernel> make_batch_norm2d_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<BatchNormKernel>(ctx, spec);
}

}  // namespace tandem
