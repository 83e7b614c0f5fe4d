// linear on a GPU: x [*, in], weight [out, in], bias [out] -> y [*, out] = x W^T + b,
// with x viewed as [M, K] and W as [N, K], through cuBLAS (gemm.h).
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
//
// Precision (the layer's precision: in the spec, else CudaContext::matmul_precision; fixed
// when the kernel is made): f32 runs every
// product in fp32 without TF32, matching the CPU. bf16 and f16 multiply 16-bit copies of
// x, W and dy on tensor cores, accumulating in fp32 and writing y, dx and dW in fp32, so
// the fp32 weights stay the master copy the optimizer updates. The weight's copy is kept
// while params_version and the weight's storage hold; x's and dy's are made per call.
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/mixed_precision.cuh"
#include "backends/cuda/kernels/pointwise.cuh"
#include "backends/cuda/ops/op_factories.h"
#include "backends/linear_plan.h"

namespace tandem::cuda {
namespace {

class LinearKernel final : public Kernel {
 public:
  LinearKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx) {
    const LinearPlan plan = plan_linear(spec);
    has_bias_ = plan.has_bias;
    m_ = plan.m, n_ = plan.n, k_ = plan.k;
    if (has_bias_ && m_ > 0) {
      ones_ = Tensor::empty({m_}, DType::float32, ctx.allocator());
      fill(ones_.data<float>(), 1.f, m_, ctx.stream().get());
    }
    const MatmulPrecision precision = matmul_precision_of(spec.precision, ctx);
    if (precision != MatmulPrecision::f32) {
      half_ = precision == MatmulPrecision::bf16 ? HalfType::bf16 : HalfType::f16;
      gemm_in_ = precision == MatmulPrecision::bf16 ? GemmType::bf16 : GemmType::f16;
      // 16-bit copies of the weight [N, K], x [M, K] and dy [M, N]
      const size_t halves = static_cast<size_t>(n_ * k_ + m_ * k_ + m_ * n_);
      halves_ = ctx.allocator().allocate(std::max<size_t>(halves, 1) * 2);
    }
  }

  void forward(const KernelArgs& args) override {
    if (m_ == 0 || n_ == 0) return;
    const float* w = args.params[0].data<float>();
    float* y = args.outputs[0].data<float>();
    float beta = 0.f;
    if (has_bias_) {  // y [M, N] = ones [M, 1] b [1, N]
      gemm(ctx_.cublas(),
           {.m = m_, .n = n_, .k = 1, .a = ones_.data<float>(), .b = args.params[1].data<float>(), .c = y});
      beta = 1.f;
    }
    const void* x = args.inputs[0].raw_data();
    const void* weight = w;
    if (mixed()) {
      weight = half_weight(w, args.params_version);
      x = to_half(args.inputs[0].data<float>(), m_ * k_, x_half());
    }
    gemm(ctx_.cublas(), {.trans_b = true, .m = m_, .n = n_, .k = k_, .a = x, .b = weight, .beta = beta, .c = y,
                         .types = {gemm_in_, GemmType::f32}});
  }

  bool backward_reads_output() const override { return false; }

  void backward(const BackwardArgs& args) override {
    if (m_ == 0) return;
    const Tensor& dx = args.grad_inputs[0];
    const Tensor& dw = args.grad_params[0];
    const void* x = args.inputs[0].raw_data();
    const void* w = args.params[0].raw_data();
    const void* dy = args.grad_outputs[0].raw_data();
    if (mixed()) {
      w = half_weight(args.params[0].data<float>(), args.params_version);
      dy = to_half(args.grad_outputs[0].data<float>(), m_ * n_, dy_half());
      if (dw.defined()) x = to_half(args.inputs[0].data<float>(), m_ * k_, x_half());
    }
    CublasHandle& h = ctx_.cublas();
    const GemmTypes types{gemm_in_, GemmType::f32};
    // dx [M, K] = dy [M, N] W [N, K]; with N = 0 an empty sum: zeros
    if (dx.defined()) gemm(h, {.m = m_, .n = k_, .k = n_, .a = dy, .b = w, .c = dx.raw_data(), .types = types});
    if (n_ == 0) return;
    // dW [N, K] += dy^T [N, M] x [M, K]
    if (dw.defined())
      gemm(h, {.trans_a = true, .m = n_, .n = k_, .k = m_, .a = dy, .b = x, .beta = 1.f, .c = dw.raw_data(),
               .types = types});
    // db [N, 1] += dy^T [N, M] ones [M, 1], in fp32
    if (has_bias_ && args.grad_params[1].defined())
      gemm(h, {.trans_a = true, .m = n_, .n = 1, .k = m_, .a = args.grad_outputs[0].data<float>(),
               .b = ones_.data<float>(), .beta = 1.f, .c = args.grad_params[1].data<float>()});
  }

 private:
  bool mixed() const { return gemm_in_ != GemmType::f32; }
  char* w_half() const { return static_cast<char*>(halves_->data()); }
  char* x_half() const { return w_half() + 2 * n_ * k_; }
  char* dy_half() const { return x_half() + 2 * m_ * k_; }

  const void* to_half(const float* src, int64_t n, char* dst) {
    cast_to_half(half_, src, dst, n, ctx_.stream().get());
    return dst;
  }

  /// The weight's 16-bit copy, made again when the weight may have changed.
  const void* half_weight(const float* w, uint64_t version) {
    if (!weight_ready_ || version != weight_version_ || version == kUnknownParamsVersion || w != weight_source_) {
      to_half(w, n_ * k_, w_half());
      weight_ready_ = true;
      weight_version_ = version;
      weight_source_ = w;
    }
    return w_half();
  }

  CudaContext& ctx_;
  bool has_bias_ = true;
  int64_t m_ = 0, n_ = 0, k_ = 0;
  Tensor ones_;  // [M] of 1.0: the bias as a rank-1 product
  GemmType gemm_in_ = GemmType::f32;
  HalfType half_ = HalfType::bf16;
  std::shared_ptr<Storage> halves_;  // mixed precision: 16-bit copies of W, x and dy
  bool weight_ready_ = false;
  uint64_t weight_version_ = 0;
  const float* weight_source_ = nullptr;
};

}  // namespace

std::unique_ptr<Kernel> make_linear_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<LinearKernel>(ctx, spec);
}

}  // namespace tandem::cuda
