// conv2d on a GPU through cuDNN: x [N, C, H, W] (or unbatched [C, H, W], run as N = 1),
// weight [O, C/groups, kh, kw], bias [O] -> y [N, O, OH, OW], torch's cross-correlation,
// in fp32 with FMA math (no TF32: cudnn_descriptors.h).
//
// In bf16 or fp16 (the layer's precision), as torch.autocast runs conv2d on a GPU: x, W
// and dy are cast to 16-bit copies, cuDNN convolves them on tensor cores computing in
// fp32, and its 16-bit results (y, dx, dW) are widened back to the fp32 tensors (dW added
// into the gradient); the bias and its gradient stay fp32.
//
// The algorithms are chosen in the factory by cuDNN's heuristics, the first that runs in
// this math, and one workspace, the largest the three need, is kept by the kernel.
//   forward:  y = conv(x, W) (+ b broadcast over N, OH, OW)
//   backward: dx  = conv_backward_data(dy, W)       (assigned: beta 0)
//             dW += conv_backward_filter(x, dy)     (accumulated: beta 1)
//             db += sum over N, OH, OW of dy        (accumulated: beta 1)
// cuDNN pads symmetrically: padding 'same' that needs more on one side is unsupported
// (the registry says so and the layer runs elsewhere).
#include <vector>

#include "backends/cuda/cudnn_descriptors.h"
#include "backends/cuda/kernels/mixed_precision.cuh"
#include "backends/cuda/ops/op_factories.h"
#include "backends/cuda/cuda_limits.h"
#include "graph/ops/window2d.h"

namespace tandem::cuda {
namespace {

/// What cuDNN's tensors hold in `precision`.
cudnnDataType_t cudnn_type(MatmulPrecision precision) {
  switch (precision) {
    case MatmulPrecision::bf16: return CUDNN_DATA_BFLOAT16;
    case MatmulPrecision::f16: return CUDNN_DATA_HALF;
    case MatmulPrecision::f32: break;
  }
  return CUDNN_DATA_FLOAT;
}

class Conv2dKernel final : public Kernel {
 public:
  Conv2dKernel(CudaContext& ctx, const KernelSpec& spec, const Window2d& win, int64_t n, MatmulPrecision precision)
      : ctx_(ctx),
        has_bias_(spec.attrs->get_bool("bias")),
        half_(precision != MatmulPrecision::f32),
        half_type_(precision == MatmulPrecision::f16 ? HalfType::f16 : HalfType::bf16),
        x_(n, spec.inputs[0].shape.end()[-3], spec.inputs[0].shape.end()[-2], spec.inputs[0].shape.end()[-1],
           cudnn_type(precision)),
        y_(n, spec.params[0].shape[0], spec.outputs[0].shape.end()[-2], spec.outputs[0].shape.end()[-1],
           cudnn_type(precision)),
        out_(n, spec.params[0].shape[0], spec.outputs[0].shape.end()[-2], spec.outputs[0].shape.end()[-1]),
        bias_(1, spec.params[0].shape[0], 1, 1),
        w_(spec.params[0].shape[0], spec.params[0].shape[1], spec.params[0].shape[2], spec.params[0].shape[3],
           cudnn_type(precision)),
        conv_(win.pad_l, win.stride, win.dilation, spec.attrs->get_int("groups"), half_),
        x_numel_(n * shape_numel(Shape(spec.inputs[0].shape.end() - 3, spec.inputs[0].shape.end()))),
        w_numel_(shape_numel(spec.params[0].shape)),
        y_numel_(n * shape_numel(Shape(spec.outputs[0].shape.end() - 3, spec.outputs[0].shape.end()))) {
    TANDEM_ASSERT(spec.params.size() == (has_bias_ ? 2u : 1u), "conv2d: wrong parameter count");
    cudnnHandle_t h = ctx.cudnn().get();
    size_t workspace = 0;
    forward_algo_ = pick<cudnnConvolutionFwdAlgoPerf_t>(
        [&](int want, int* got, cudnnConvolutionFwdAlgoPerf_t* perf) {
          return cudnnGetConvolutionForwardAlgorithm_v7(h, x_.get(), w_.get(), conv_.get(), y_.get(), want, got, perf);
        },
        [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(h, x_.get(), w_.get(), conv_.get(), y_.get(), algo, bytes);
        },
        workspace, "forward");
    data_algo_ = pick<cudnnConvolutionBwdDataAlgoPerf_t>(
        [&](int want, int* got, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
          return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w_.get(), y_.get(), conv_.get(), x_.get(), want, got,
                                                             perf);
        },
        [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(h, w_.get(), y_.get(), conv_.get(), x_.get(), algo,
                                                              bytes);
        },
        workspace, "backward data");
    filter_algo_ = pick<cudnnConvolutionBwdFilterAlgoPerf_t>(
        [&](int want, int* got, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
          return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x_.get(), y_.get(), conv_.get(), w_.get(), want, got,
                                                               perf);
        },
        [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x_.get(), y_.get(), conv_.get(), w_.get(), algo,
                                                                bytes);
        },
        workspace, "backward filter");
    if (workspace > 0) workspace_ = ctx.allocator().allocate(workspace);
    workspace_bytes_ = workspace;
    // 16-bit x (dx in backward, once dW has read x), W, y (dy in backward) and dW
    if (half_) halves_ = ctx.allocator().allocate(std::max<size_t>(2 * (x_numel_ + 2 * w_numel_ + y_numel_), 2));
  }

  void forward(const KernelArgs& args) override {
    const float one = 1.f, zero = 0.f;
    cudnnHandle_t h = ctx_.cudnn().get();
    float* y = args.outputs[0].data<float>();
    TANDEM_CUDNN_CHECK(cudnnConvolutionForward(h, &one, x_.get(), operand(args.inputs[0], x16(), x_numel_), w_.get(),
                                               operand(args.params[0], w16(), w_numel_), conv_.get(), forward_algo_,
                                               workspace(), workspace_bytes_, &zero, y_.get(), half_ ? y16() : y));
    if (half_) widen_from_half(half_type_, y16(), y, y_numel_, false, stream());
    if (has_bias_)
      TANDEM_CUDNN_CHECK(cudnnAddTensor(h, &one, bias_.get(), args.params[1].raw_data(), &one, out_.get(), y));
  }

  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    const float one = 1.f, zero = 0.f;
    cudnnHandle_t h = ctx_.cudnn().get();
    const void* dy = operand(args.grad_outputs[0], y16(), y_numel_);
    const Tensor& dx = args.grad_inputs[0];
    const Tensor& dw = args.grad_params[0];
    if (dw.defined()) {  // first: in 16 bits dx then takes x's copy's place
      TANDEM_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, x_.get(), operand(args.inputs[0], x16(), x_numel_),
                                                        y_.get(), dy, conv_.get(), filter_algo_, workspace(),
                                                        workspace_bytes_, half_ ? &zero : &one, w_.get(),
                                                        half_ ? dw16() : dw.raw_data()));
      if (half_) widen_from_half(half_type_, dw16(), dw.data<float>(), w_numel_, /*accumulate=*/true, stream());
    }
    if (dx.defined()) {
      TANDEM_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, w_.get(), operand(args.params[0], w16(), w_numel_),
                                                      y_.get(), dy, conv_.get(), data_algo_, workspace(),
                                                      workspace_bytes_, &zero, x_.get(), half_ ? x16() : dx.raw_data()));
      if (half_) widen_from_half(half_type_, x16(), dx.data<float>(), x_numel_, false, stream());
    }
    if (has_bias_ && args.grad_params[1].defined())
      TANDEM_CUDNN_CHECK(cudnnConvolutionBackwardBias(h, &one, out_.get(), args.grad_outputs[0].raw_data(), &one,
                                                      bias_.get(), args.grad_params[1].raw_data()));
  }

 private:
  /// The first algorithm cuDNN's heuristics rank that it can run here; raises `workspace`
  /// to what it needs.
  template <class Perf, class Find, class Size>
  auto pick(Find&& find, Size&& size, size_t& workspace, const char* what) const -> decltype(Perf{}.algo) {
    constexpr int kWant = 8;
    Perf perf[kWant];
    int got = 0;
    TANDEM_CUDNN_CHECK(find(kWant, &got, perf));
    for (int i = 0; i < got; ++i) {
      size_t bytes = 0;
      if (perf[i].status != CUDNN_STATUS_SUCCESS || size(perf[i].algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
      workspace = std::max(workspace, bytes);
      return perf[i].algo;
    }
    throw Unsupported(std::string("conv2d: cuDNN has no ") + what + " algorithm for this shape " +
                      (half_ ? "in 16 bits on tensor cores" : "in fp32 FMA math"));
  }

  /// `t` as cuDNN reads it: itself in fp32, else its 16-bit copy, cast into `copy`.
  const void* operand(const Tensor& t, void* copy, int64_t n) const {
    if (!half_) return t.raw_data();
    cast_to_half(half_type_, t.data<float>(), copy, n, stream());
    return copy;
  }
  cudaStream_t stream() const { return ctx_.stream().get(); }
  char* halves() const { return static_cast<char*>(halves_->data()); }
  void* x16() const { return halves(); }
  void* w16() const { return halves() + 2 * x_numel_; }
  void* y16() const { return halves() + 2 * (x_numel_ + w_numel_); }
  void* dw16() const { return halves() + 2 * (x_numel_ + w_numel_ + y_numel_); }
  void* workspace() const { return workspace_ ? workspace_->data() : nullptr; }

  CudaContext& ctx_;
  bool has_bias_;
  bool half_;             // bf16 or fp16 tensors for cuDNN (the layer's precision)
  HalfType half_type_;
  TensorDescriptor x_, y_;  // in cuDNN's type
  TensorDescriptor out_, bias_;  // fp32: y as the layer gives it, and the bias
  FilterDescriptor w_;
  ConvolutionDescriptor conv_;
  int64_t x_numel_, w_numel_, y_numel_;
  cudnnConvolutionFwdAlgo_t forward_algo_{};
  cudnnConvolutionBwdDataAlgo_t data_algo_{};
  cudnnConvolutionBwdFilterAlgo_t filter_algo_{};
  std::shared_ptr<Storage> workspace_;
  size_t workspace_bytes_ = 0;
  std::shared_ptr<Storage> halves_;  // 16 bits: the copies of x, W, y and dW
};

}  // namespace

std::unique_ptr<Kernel> make_conv2d_kernel(CudaContext& ctx, const KernelSpec& spec) {
  const Shape& x = spec.inputs.at(0).shape;
  TANDEM_ASSERT(x.size() == 3 || x.size() == 4, "conv2d: input must be [N, C, H, W] or [C, H, W]");
  const Window2d win = conv2d_window(*spec.attrs);
  const std::array<int64_t, 2> in{x.end()[-2], x.end()[-1]};
  const Shape& y = spec.outputs.at(0).shape;
  TANDEM_ASSERT(win.output_size(in) == (std::array<int64_t, 2>{y.end()[-2], y.end()[-1]}),
                "conv2d: output shape disagrees with the schema");
  if (std::string why = conv2d_limit(spec); !why.empty()) throw Unsupported(why);
  return std::make_unique<Conv2dKernel>(ctx, spec, win, x.size() == 4 ? x[0] : 1, matmul_precision_of(spec.precision, ctx));
}

}  // namespace tandem::cuda
