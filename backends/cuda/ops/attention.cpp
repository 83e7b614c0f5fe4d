// multi_head_attention on a GPU: the CPU kernel's op (backends/cpu/ops/attention.cpp, where
// the shapes, masks and formulas are), in fp32 through cuBLAS.
//
// The CPU multiplies heads in place through strides; cuBLAS's strided batched GEMM needs
// one stride between the N H blocks, which a sequence-first projection has but a
// batch_first one does not. So each projection is moved once into heads [N, H, X, D]
// (kernels/attention.cuh), every head product is one strided batched GEMM over the N H
// blocks, and the context comes back to rows before the output projection. Biases are
// rank-1 products with a column of ones, as in linear.cpp.
//
// Forward keeps the heads of Q, K, V, the attention weights P (and P' after dropout) and
// the context rows C for backward, as the CPU kernel does; backward's scratch comes from
// the device's caching allocator per call. Every product runs in the layer's matmul
// precision (precision_gemms.h: bf16 or fp16 reads, fp32 results); the softmax, the masks
// and the dropout stay fp32, as under torch.autocast.
#include <algorithm>
#include <cmath>

#include "backends/attention_plan.h"
#include "backends/cuda/cuda_error.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/precision_gemms.h"
#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/kernels/dropout.cuh"
#include "backends/cuda/kernels/pointwise.cuh"
#include "backends/cuda/kernels/softmax.cuh"
#include "backends/cuda/ops/op_factories.h"

namespace tandem::cuda {
namespace {

class AttentionKernel final : public Kernel {
 public:
  AttentionKernel(CudaContext& ctx, const KernelSpec& spec)
      : ctx_(ctx), p_(plan_attention(spec)), gemms_(ctx, matmul_precision_of(spec.precision, ctx)) {
    scale_ = 1.f / std::sqrt(static_cast<float>(p_.d));

    Allocator& alloc = ctx.allocator();
    const int64_t rq = p_.l * p_.n, rk = p_.s * p_.n;
    ones_ = Tensor::empty({std::max<int64_t>({rq, rk, 1})}, DType::float32, alloc);
    fill(ones_.data<float>(), 1.f, ones_.numel(), ctx.stream().get());
    qh_ = Tensor::empty({rq * p_.e}, DType::float32, alloc);
    kh_ = Tensor::empty({rk * p_.e}, DType::float32, alloc);
    vh_ = Tensor::empty({rk * p_.e}, DType::float32, alloc);
    context_ = Tensor::empty({rq * p_.e}, DType::float32, alloc);
    probs_ = Tensor::empty({p_.n * p_.heads * p_.l * p_.s}, DType::float32, alloc);
  }

  void forward(const KernelArgs& args) override {
    dropping_ = args.training && p_.dropout > 0;
    seed_ = args.seed;
    if (p_.n == 0) return;
    const cudaStream_t stream = ctx_.stream().get();
    Allocator& alloc = ctx_.allocator();
    const int64_t rq = p_.l * p_.n, rk = p_.s * p_.n, nh = p_.n * p_.heads;
    const float* w_in = args.params[0].data<float>();
    const float* b_in = p_.has_bias ? args.params[1].data<float>() : nullptr;
    const float* w_out = args.params[p_.has_bias ? 2 : 1].data<float>();
    const float* b_out = p_.has_bias ? args.params[3].data<float>() : nullptr;
    const int64_t ee = p_.e * p_.e;

    Tensor rows = Tensor::empty({std::max(rq, rk) * p_.e}, DType::float32, alloc);
    float* projected = rows.data<float>();
    project(input(args.inputs, 0), rq, w_in, b_in, projected);
    split_heads(heads_shape(p_.l), projected, qh_.data<float>(), stream);
    project(input(args.inputs, 1), rk, w_in + ee, b_in ? b_in + p_.e : nullptr, projected);
    split_heads(heads_shape(p_.s), projected, kh_.data<float>(), stream);
    project(input(args.inputs, 2), rk, w_in + 2 * ee, b_in ? b_in + 2 * p_.e : nullptr, projected);
    split_heads(heads_shape(p_.s), projected, vh_.data<float>(), stream);

    // scores [N H, L, S] = Q_h K_h^T / sqrt(D), masked, then P = softmax over S
    Tensor scores = Tensor::empty({nh * p_.l * p_.s}, DType::float32, alloc);
    gemms_.gemm_strided_batched({.trans_b = true, .m = p_.l, .n = p_.s, .k = p_.d, .alpha = scale_, .a = qh_.data<float>(),
                             .b = kh_.data<float>(), .c = scores.data<float>()},
                         {.batch = nh, .a = p_.l * p_.d, .b = p_.s * p_.d, .c = p_.l * p_.s});
    apply_attention_masks(masks(args.inputs), p_.n, p_.heads, p_.l, p_.s, scores.data<float>(), stream);
    softmax_forward(false, {.outer = nh * p_.l, .axis = p_.s, .inner = 1}, scores.data<float>(), probs_.data<float>(),
                    stream);
    if (dropping_) {
      if (!dropped_.defined()) dropped_ = Tensor::empty(probs_.shape(), DType::float32, alloc);
      dropout_mask_apply(probs_.data<float>(), dropped_.data<float>(), probs_.numel(), static_cast<float>(p_.dropout),
                         seed_, stream);
    }
    // C_h [N H, L, D] = P' V_h, back to rows, then out = C Wo^T + bo
    Tensor context_h = Tensor::empty({rq * p_.e}, DType::float32, alloc);
    gemms_.gemm_strided_batched({.m = p_.l, .n = p_.d, .k = p_.s, .a = weights(), .b = vh_.data<float>(),
                             .c = context_h.data<float>()},
                         {.batch = nh, .a = p_.l * p_.s, .b = p_.s * p_.d, .c = p_.l * p_.d});
    merge_heads(heads_shape(p_.l), context_h.data<float>(), context_.data<float>(), stream);
    project(context_.data<float>(), rq, w_out, b_out, args.outputs[0].data<float>());
  }

  bool backward_reads_output() const override { return false; }  // Q, K, V, P, C are kept

  void backward(const BackwardArgs& args) override {
    if (p_.n == 0) return;  // an empty query still owes its key and value zero gradients
    const cudaStream_t stream = ctx_.stream().get();
    Allocator& alloc = ctx_.allocator();
    const int64_t rq = p_.l * p_.n, rk = p_.s * p_.n, nh = p_.n * p_.heads, ee = p_.e * p_.e;
    const float* w_in = args.params[0].data<float>();
    const float* w_out = args.params[p_.has_bias ? 2 : 1].data<float>();
    float* dw_in = grad(args.grad_params, 0);
    float* db_in = p_.has_bias ? grad(args.grad_params, 1) : nullptr;
    float* dw_out = grad(args.grad_params, p_.has_bias ? 2 : 1);
    float* db_out = p_.has_bias ? grad(args.grad_params, 3) : nullptr;
    const float* d_o = args.grad_outputs[0].data<float>();

    // the output projection: dWo += dO^T C, dbo += dO^T 1, dC = dO Wo
    if (dw_out) gemms_.gemm({.trans_a = true, .m = p_.e, .n = p_.e, .k = rq, .a = d_o, .b = context_.data<float>(), .beta = 1.f, .c = dw_out});
    if (db_out) gemms_.gemm({.trans_a = true, .m = p_.e, .n = 1, .k = rq, .a = d_o, .b = ones_.data<float>(), .beta = 1.f, .c = db_out});
    Tensor rows = Tensor::empty({std::max(rq, rk) * p_.e}, DType::float32, alloc);
    gemms_.gemm({.m = rq, .n = p_.e, .k = p_.e, .a = d_o, .b = w_out, .c = rows.data<float>()});
    Tensor d_context_h = Tensor::empty({rq * p_.e}, DType::float32, alloc);
    split_heads(heads_shape(p_.l), rows.data<float>(), d_context_h.data<float>(), stream);

    // dP = dC_h V_h^T (through the dropout mask), dV_h = P'^T dC_h, dS = softmax_backward
    Tensor d_probs = Tensor::empty({nh * p_.l * p_.s}, DType::float32, alloc);
    Tensor d_vh = Tensor::empty({rk * p_.e}, DType::float32, alloc);
    gemms_.gemm_strided_batched({.trans_b = true, .m = p_.l, .n = p_.s, .k = p_.d, .a = d_context_h.data<float>(),
                             .b = vh_.data<float>(), .c = d_probs.data<float>()},
                         {.batch = nh, .a = p_.l * p_.d, .b = p_.s * p_.d, .c = p_.l * p_.s});
    gemms_.gemm_strided_batched({.trans_a = true, .m = p_.s, .n = p_.d, .k = p_.l, .a = weights(), .b = d_context_h.data<float>(),
                             .c = d_vh.data<float>()},
                         {.batch = nh, .a = p_.l * p_.s, .b = p_.l * p_.d, .c = p_.s * p_.d});
    if (dropping_)
      dropout_mask_apply(d_probs.data<float>(), d_probs.data<float>(), d_probs.numel(), static_cast<float>(p_.dropout),
                         seed_, stream);
    Tensor d_scores = Tensor::empty({nh * p_.l * p_.s}, DType::float32, alloc);
    softmax_backward(false, {.outer = nh * p_.l, .axis = p_.s, .inner = 1}, probs_.data<float>(), d_probs.data<float>(),
                     d_scores.data<float>(), stream);
    if (p_.mask_float && args.grad_inputs[static_cast<size_t>(p_.mask_slot)].defined()) {
      float* d_mask = args.grad_inputs[static_cast<size_t>(p_.mask_slot)].data<float>();
      if (p_.mask_per_head)
        TANDEM_CUDA_CHECK(cudaMemcpyAsync(d_mask, d_scores.data<float>(), d_scores.nbytes(), cudaMemcpyDeviceToDevice, stream));
      else
        attention_mask_grad_shared(d_scores.data<float>(), nh, p_.l * p_.s, d_mask, stream);
    }
    // dQ_h = dS K_h / sqrt(D), dK_h = dS^T Q_h / sqrt(D)
    Tensor d_qh = Tensor::empty({rq * p_.e}, DType::float32, alloc);
    Tensor d_kh = Tensor::empty({rk * p_.e}, DType::float32, alloc);
    gemms_.gemm_strided_batched({.m = p_.l, .n = p_.d, .k = p_.s, .alpha = scale_, .a = d_scores.data<float>(),
                             .b = kh_.data<float>(), .c = d_qh.data<float>()},
                         {.batch = nh, .a = p_.l * p_.s, .b = p_.s * p_.d, .c = p_.l * p_.d});
    gemms_.gemm_strided_batched({.trans_a = true, .m = p_.s, .n = p_.d, .k = p_.l, .alpha = scale_, .a = d_scores.data<float>(),
                             .b = qh_.data<float>(), .c = d_kh.data<float>()},
                         {.batch = nh, .a = p_.l * p_.s, .b = p_.l * p_.d, .c = p_.s * p_.d});

    // the three input projections: dW += dP^T x, db += dP^T 1, dx = dP W (self-attention:
    // the three summed into the one input)
    const float* d_heads[3] = {d_qh.data<float>(), d_kh.data<float>(), d_vh.data<float>()};
    for (int p = 0; p < 3; ++p) {
      const int64_t r = p == 0 ? rq : rk;
      merge_heads(heads_shape(p == 0 ? p_.l : p_.s), d_heads[p], rows.data<float>(), stream);
      const float* d_proj = rows.data<float>();
      const float* x = input(args.inputs, p);
      if (dw_in) gemms_.gemm({.trans_a = true, .m = p_.e, .n = p_.e, .k = r, .a = d_proj, .b = x, .beta = 1.f, .c = dw_in + p * ee});
      if (db_in)
        gemms_.gemm({.trans_a = true, .m = p_.e, .n = 1, .k = r, .a = d_proj, .b = ones_.data<float>(), .beta = 1.f,
                 .c = db_in + p * p_.e});
      const size_t slot = static_cast<size_t>(p_.qkv == 1 ? 0 : p);
      if (!args.grad_inputs[slot].defined()) continue;
      gemms_.gemm({.m = r, .n = p_.e, .k = p_.e, .a = d_proj, .b = w_in + p * ee, .beta = p_.qkv == 1 && p > 0 ? 1.f : 0.f,
               .c = args.grad_inputs[slot].data<float>()});
    }
  }

 private:
  HeadsShape heads_shape(int64_t length) const {
    return {.batch = p_.n, .length = length, .heads = p_.heads, .dim = p_.d, .batch_first = p_.batch_first};
  }

  /// out [rows, E] = x [rows, E] W^T (+ 1 b^T): a projection with W [E, E].
  void project(const float* x, int64_t rows, const float* w, const float* b, float* out) {
    float beta = 0.f;
    if (b) {
      gemms_.gemm({.m = rows, .n = p_.e, .k = 1, .a = ones_.data<float>(), .b = b, .c = out});
      beta = 1.f;
    }
    gemms_.gemm({.trans_b = true, .m = rows, .n = p_.e, .k = p_.e, .a = x, .b = w, .beta = beta, .c = out});
  }

  AttentionMasks masks(std::span<const Tensor> inputs) const {
    AttentionMasks m;
    m.causal = p_.causal;
    if (p_.key_padding_slot >= 0) m.key_padding = inputs[static_cast<size_t>(p_.key_padding_slot)].data<int64_t>();
    if (p_.mask_slot >= 0) {
      const Tensor& mask = inputs[static_cast<size_t>(p_.mask_slot)];
      if (p_.mask_float) m.float_mask = mask.data<float>();
      else m.int_mask = mask.data<int64_t>();
      m.per_head = p_.mask_per_head;
    }
    return m;
  }

  /// The attention weights the values were averaged with: P, or P' after dropout.
  const float* weights() const { return dropping_ ? dropped_.data<float>() : probs_.data<float>(); }

  /// query, key or value (p = 0, 1, 2); all the first input in self-attention.
  const float* input(std::span<const Tensor> inputs, int p) const {
    return inputs[static_cast<size_t>(p_.qkv == 1 ? 0 : p)].data<float>();
  }

  static float* grad(std::span<Tensor> grads, size_t i) { return grads[i].defined() ? grads[i].data<float>() : nullptr; }

  CudaContext& ctx_;
  const AttentionPlan p_;  // shapes, masks and options
  PrecisionGemms gemms_;   // every product, in the layer's matmul precision
  float scale_ = 1.f;
  bool dropping_ = false;  // the last forward dropped attention weights (backward follows it)
  uint64_t seed_ = 0;      // ... with this seed
  Tensor ones_;            // [max(L N, S N)] of 1.0: biases as rank-1 products
  Tensor qh_, kh_, vh_, probs_, dropped_, context_;  // the last forward's, for backward
};

}  // namespace

std::unique_ptr<Kernel> make_multi_head_attention_kernel(CudaContext& ctx, const KernelSpec& spec) {
  return std::make_unique<AttentionKernel>(ctx, spec);
}

}  // namespace tandem::cuda
