// linear on a GPU: x [*, in], weight [out, in], bias [out] -> y [*, out] = x W^T + b,
// with x viewed as [M, K] and W as [N, K]; cuBLAS in fp32 (no TF32: gemm.h).
//
// The bias goes through cuBLAS as well, as a rank-1 product with a column of ones
// (kept by the kernel, [M]): y = ones b^T, then y += x W^T (beta 1). That is one more
// pass over y than a fused epilogue, and no kernel of our own.
//
// Backward, dy [M, N]:
//   dx [M, K]  = dy W          (assigned: beta 0)
//   dW [N, K] += dy^T x        (accumulated: beta 1)
//   db [N]    += dy^T ones     (accumulated: beta 1)
// It needs x and the weight, not the output.
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/pointwise.cuh"
#include "backends/cuda/ops/op_factories.h"

namespace tandem::cuda {
namespace {

class LinearKernel final : public Kernel {
 public:
  LinearKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx) {
    const Shape& x = spec.inputs.at(0).shape;
    TANDEM_ASSERT(!x.empty(), "linear: input must have rank >= 1");
    has_bias_ = spec.attrs->get_bool("bias");
    TANDEM_ASSERT(spec.params.size() == (has_bias_ ? 2u : 1u), "linear: wrong parameter count");
    k_ = x.back();
    n_ = spec.params[0].shape.at(0);
    TANDEM_ASSERT(spec.params[0].shape.at(1) == k_, "linear: weight does not match input features");
    m_ = shape_numel(std::span(x).first(x.size() - 1));
    if (has_bias_ && m_ > 0) {
      ones_ = Tensor::empty({m_}, DType::float32, ctx.allocator());
      fill(ones_.data<float>(), 1.f, m_, ctx.stream().get());
    }
  }

  void forward(const KernelArgs& args) override {
    if (m_ == 0 || n_ == 0) return;
    const float* x = args.inputs[0].data<float>();
    const float* w = args.params[0].data<float>();
    float* y = args.outputs[0].data<float>();
    float beta = 0.f;
    if (has_bias_) {  // y [M, N] = ones [M, 1] b [1, N]
      gemm(ctx_.cublas(),
           {.m = m_, .n = n_, .k = 1, .a = ones_.data<float>(), .b = args.params[1].data<float>(), .c = y});
      beta = 1.f;
    }
    gemm(ctx_.cublas(), {.trans_b = true, .m = m_, .n = n_, .k = k_, .a = x, .b = w, .beta = beta, .c = y});
  }

  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (m_ == 0) return;
    const float* x = args.inputs[0].data<float>();
    const float* w = args.params[0].data<float>();
    const float* dy = args.grad_outputs[0].data<float>();
    const Tensor& dx = args.grad_inputs[0];
    const Tensor& dw = args.grad_params[0];
    CublasHandle& h = ctx_.cublas();
    // dx [M, K] = dy [M, N] W [N, K]; with N = 0 an empty sum: zeros
    if (dx.defined()) gemm(h, {.m = m_, .n = k_, .k = n_, .a = dy, .b = w, .c = dx.data<float>()});
    if (n_ == 0) return;
    // dW [N, K] += dy^T [N, M] x [M, K]
    if (dw.defined())
      gemm(h, {.trans_a = true, .m = n_, .n = k_, .k = m_, .a = dy, .b = x, .beta = 1.f, .c = dw.data<float>()});
    // db [N, 1] += dy^T [N, M] ones [M, 1]
    if (has_bias_ && args.grad_params[1].defined())
      gemm(h, {.trans_a = true, .m = n_, .n = 1, .k = m_, .a = dy, .b = ones_.data<float>(), .beta = 1.f,
               .c = args.grad_params[1].data<float>()});
  }

 private:
  CudaContext& ctx_;
  bool has_bias_ = true;
  int64_t m_ = 0, n_ = 0, k_ = 0;
  Tensor ones_;  // [M] of 1.0: the bias as a rank-1 product
};

}  // namespace

std::unique_ptr<Kernel> make_linear_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<LinearKernel>(ctx, spec);
}

}  // namespace tandem::cuda
