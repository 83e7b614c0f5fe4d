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
// this math (in 16 bits: deterministic ones first, each with the math type cuDNN ranked
// it under), and one workspace, the largest the three need, is kept by the kernel.
//   forward:  y = conv(x, W) (+ b broadcast over N, OH, OW)
//   backward: dx  = conv_backward_data(dy, W)       (assigned: beta 0)
//             dW += conv_backward_filter(x, dy)     (accumulated: beta 1)
//             db += sum over N, OH, OW of dy        (accumulated: beta 1)
// cuDNN pads symmetrically: padding 'same' that needs more on one side is unsupported
// (the registry says so and the layer runs elsewhere).
#include <algorithm>
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
    forward_ = pick<cudnnConvolutionFwdAlgoPerf_t>(
        [&](int want, int* got, cudnnConvolutionFwdAlgoPerf_t* perf) {
          return cudnnGetConvolutionForwardAlgorithm_v7(h, x_.get(), w_.get(), conv_.get(), y_.get(), want, got, perf);
        },
        [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(h, x_.get(), w_.get(), conv_.get(), y_.get(), algo, bytes);
        },
        workspace, "forward");
    data_ = pick<cudnnConvolutionBwdDataAlgoPerf_t>(
        [&](int want, int* got, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
          return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w_.get(), y_.get(), conv_.get(), x_.get(), want, got,
                                                             perf);
        },
        [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(h, w_.get(), y_.get(), conv_.get(), x_.get(), algo,
                                                              bytes);
        },
        workspace, "backward data");
    filter_ = pick<cudnnConvolutionBwdFilterAlgoPerf_t>(
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
    // 16-bit x (dx in backward, once dW has read x), W, y (dy in backward) and dW, each on
    // a 256-byte boundary as cudaMalloc's own blocks are
    if (half_) halves_ = ctx.allocator().allocate(std::max<size_t>(half_offset(4), 256));
  }

  void forward(const KernelArgs& args) override {
    const float one = 1.f, zero = 0.f;
    cudnnHandle_t h = ctx_.cudnn().get();
    float* y = args.outputs[0].data<float>();
    set_math(forward_.math);
    TANDEM_CUDNN_CHECK(cudnnConvolutionForward(h, &one, x_.get(), operand(args.inputs[0], x16(), x_numel_), w_.get(),
                                               operand(args.params[0], w16(), w_numel_), conv_.get(), forward_.algo,
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
      set_math(filter_.math);
      TANDEM_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, x_.get(), operand(args.inputs[0], x16(), x_numel_),
                                                        y_.get(), dy, conv_.get(), filter_.algo, workspace(),
                                                        workspace_bytes_, half_ ? &zero : &one, w_.get(),
                                                        half_ ? dw16() : dw.raw_data()));
      if (half_) widen_from_half(half_type_, dw16(), dw.data<float>(), w_numel_, /*accumulate=*/true, stream());
    }
    if (dx.defined()) {
      set_math(data_.math);
      TANDEM_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, w_.get(), operand(args.params[0], w16(), w_numel_),
                                                      y_.get(), dy, conv_.get(), data_.algo, workspace(),
                                                      workspace_bytes_, &zero, x_.get(), half_ ? x16() : dx.raw_data()));
      if (half_) widen_from_half(half_type_, x16(), dx.data<float>(), x_numel_, false, stream());
    }
    if (has_bias_ && args.grad_params[1].defined())
      TANDEM_CUDNN_CHECK(cudnnConvolutionBackwardBias(h, &one, out_.get(), args.grad_outputs[0].raw_data(), &one,
                                                      bias_.get(), args.grad_params[1].raw_data()));
  }

 private:
  /// An algorithm and the math type cuDNN ranked it with.
  template <class Algo>
  struct Choice {
    Algo algo{};
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  };

  /// The first algorithm cuDNN's heuristics rank that it can run here; raises `workspace`
  /// to what it needs. In 16 bits: with the math type cuDNN ranked it under (an algorithm
  /// ranked under default math may refuse tensor-op math: PyTorch sets each one's, and
  /// CUDA.jl met CUDNN_STATUS_BAD_PARAM on fp16 without), and deterministic ones first: an
  /// algorithm that adds in a varying order gives fp32 noise that a 16-bit rounding can
  /// turn into a whole bf16 step, where the runs of one kernel should agree.
  template <class Perf, class Find, class Size>
  auto pick(Find&& find, Size&& size, size_t& workspace, const char* what) const -> Choice<decltype(Perf{}.algo)> {
    constexpr int kWant = 8;
    Perf perf[kWant];
    int got = 0;
    TANDEM_CUDNN_CHECK(find(kWant, &got, perf));
    for (int pass = half_ ? 0 : 1; pass < 2; ++pass) {
      for (int i = 0; i < got; ++i) {
        if (pass == 0 && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
        if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
        set_math(perf[i].mathType);
        size_t bytes = 0;
        if (size(perf[i].algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
        workspace = std::max(workspace, bytes);
        return {perf[i].algo, perf[i].mathType};
      }
    }
    throw Unsupported(std::string("conv2d: cuDNN has no ") + what + " algorithm for this shape " +
                      (half_ ? "in 16 bits on tensor cores" : "in fp32 FMA math"));
  }
  /// In 16 bits, the descriptor's math type for the next call (one descriptor serves the
  /// three directions, each with its algorithm's math type). fp32 keeps FMA math throughout.
  void set_math(cudnnMathType_t math) const {
    if (half_) TANDEM_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.get(), math));
  }

  /// `t` as cuDNN reads it: itself in fp32, else its 16-bit copy, cast into `copy`.
  const void* operand(const Tensor& t, void* copy, int64_t n) const {
    if (!half_) return t.raw_data();
    cast_to_half(half_type_, t.data<float>(), copy, n, stream());
    return copy;
  }
  cudaStream_t stream() const { return ctx_.stream().get(); }
  /// Byte offset of the k-th 16-bit copy (x, W, y, dW; 4: their total), 256-aligned each.
  size_t half_offset(int k) const {
    const int64_t numel[4] = {x_numel_, w_numel_, y_numel_, w_numel_};
    size_t at = 0;
    for (int i = 0; i < k; ++i) at += (static_cast<size_t>(2 * numel[i]) + 255) / 256 * 256;
    return at;
  }
  /// The k-th copy; null in fp32, which has none (and never reads these).
  void* half_copy(int k) const {
    return halves_ ? static_cast<char*>(halves_->data()) + half_offset(k) : nullptr;
  }
  void* x16() const { return half_copy(0); }
  void* w16() const { return half_copy(1); }
  void* y16() const { return half_copy(2); }
  void* dw16() const { return half_copy(3); }
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
  Choice<cudnnConvolutionFwdAlgo_t> forward_;
  Choice<cudnnConvolutionBwdDataAlgo_t> data_;
  Choice<cudnnConvolutionBwdFilterAlgo_t> filter_;
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
