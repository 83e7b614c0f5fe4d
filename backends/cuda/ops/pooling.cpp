// max_pool2d and avg_pool2d on a GPU through cuDNN: x [N, C, H, W] (or [C, H, W]) ->
// y [N, C, OH, OW], torch's MaxPool2d / AvgPool2d. cuDNN pools with symmetric padding and
// no dilation, so ceil_mode windows that pass the right edge, and dilated max pooling,
// are unsupported (the registry says so and the layer runs elsewhere). Within that,
// count_include_pad's divisor is always the whole window, which is cuDNN's
// AVERAGE_COUNT_INCLUDE_PADDING.
//
// Backward (dx assigned) reads x and y: cuDNN finds each maximum again from them rather
// than keeping a workspace as oneDNN does. Max pooling backward is deterministic mode.
#include "backends/cuda/cudnn_descriptors.h"
#include "backends/cuda/ops/op_factories.h"
#include "backends/cuda/cuda_limits.h"
#include "graph/ops/window2d.h"

namespace tandem::cuda {
namespace {

class Pool2dKernel final : public Kernel {
 public:
  Pool2dKernel(CudaContext& ctx, cudnnPoolingMode_t mode, const Window2d& win, int64_t n, int64_t c,
               std::array<int64_t, 2> in, std::array<int64_t, 2> out)
      : ctx_(ctx), x_(n, c, in[0], in[1]), y_(n, c, out[0], out[1]), pool_(mode, win.kernel, win.pad_l, win.stride) {}

  void forward(const KernelArgs& args) override {
    const float one = 1.f, zero = 0.f;
    TANDEM_CUDNN_CHECK(cudnnPoolingForward(ctx_.cudnn().get(), pool_.get(), &one, x_.get(), args.inputs[0].raw_data(),
                                           &zero, y_.get(), args.outputs[0].raw_data()));
  }

  void backward(const BackwardArgs& args) override {
    if (!args.grad_inputs[0].defined()) return;
    const float one = 1.f, zero = 0.f;
    TANDEM_CUDNN_CHECK(cudnnPoolingBackward(ctx_.cudnn().get(), pool_.get(), &one, y_.get(),
                                            args.outputs[0].raw_data(), y_.get(), args.grad_outputs[0].raw_data(),
                                            x_.get(), args.inputs[0].raw_data(), &zero, x_.get(),
                                            args.grad_inputs[0].raw_data()));
  }

 private:
  CudaContext& ctx_;
  TensorDescriptor x_, y_;
  PoolingDescriptor pool_;
};

std::unique_ptr<Kernel> make_pool(CudaContext& ctx, const KernelSpec& spec, bool is_max) {
  const Shape& x = spec.inputs.at(0).shape;
  TANDEM_ASSERT(x.size() == 3 || x.size() == 4, "pool2d: input must be [N, C, H, W] or [C, H, W]");
  const Window2d win = pool2d_window(*spec.attrs);
  const std::array<int64_t, 2> in{x.end()[-2], x.end()[-1]};
  const std::array<int64_t, 2> out = win.output_size(in);
  if (std::string why = pool2d_limit(spec); !why.empty()) throw Unsupported(why);
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX_DETERMINISTIC;
  if (!is_max)
    mode = spec.attrs->get_bool("count_include_pad") ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                      : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  return std::make_unique<Pool2dKernel>(ctx, mode, win, x.size() == 4 ? x[0] : 1, x.end()[-3], in, out);
}

}  // namespace

std::unique_ptr<Kernel> make_max_pool2d_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return make_pool(ctx, spec, true);
}
std::unique_ptr<Kernel> make_avg_pool2d_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return make_pool(ctx, spec, false);
}

}  // namespace tandem::cuda
