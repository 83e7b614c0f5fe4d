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
// the device's caching allocator per call. Always fp32: the matmul precision setting
// (bf16, f16) applies to linear layers only.
#include <algorithm>
#include <cmath>

#include "backends/cuda/cuda_error.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/kernels/pointwise.cuh"
#include "backends/cuda/kernels/softmax.cuh"
#include "backends/cuda/ops/op_factories.h"

namespace tandem::cuda {
namespace {

class AttentionKernel final : public Kernel {
 public:
  AttentionKernel(CudaContext& ctx, const KernelSpec& spec) : ctx_(ctx) {
    const Attributes& a = *spec.attrs;
    e_ = a.get_int("embed_dim");
    h_ = a.get_int("num_heads");
    d_ = e_ / h_;
    has_bias_ = a.get_bool("bias");
    batch_first_ = a.get_bool("batch_first");
    causal_ = a.get_bool("causal");
    dropout_ = a.get_float("dropout");
    const std::string& masks = a.get_string("masks");
    const int64_t n_masks = masks == "none" ? 0 : masks == "both" ? 2 : 1;
    qkv_ = static_cast<int64_t>(spec.inputs.size()) - n_masks;
    TANDEM_ASSERT(qkv_ == 1 || qkv_ == 3, "multi_head_attention: wrong input count");
    int64_t slot = qkv_;
    if (masks == "key_padding_mask" || masks == "both") kpm_slot_ = slot++;
    if (masks == "attn_mask" || masks == "both") {
      mask_slot_ = slot++;
      mask_float_ = spec.inputs[static_cast<size_t>(mask_slot_)].dtype == DType::float32;
      mask_per_head_ = spec.inputs[static_cast<size_t>(mask_slot_)].shape.size() == 3;
    }
    const Shape& q = spec.inputs[0].shape;
    const Shape& k = spec.inputs[static_cast<size_t>(qkv_ == 3 ? 1 : 0)].shape;
    n_ = batch_first_ ? q[0] : q[1];
    l_ = batch_first_ ? q[1] : q[0];
    s_ = batch_first_ ? k[1] : k[0];
    scale_ = 1.f / std::sqrt(static_cast<float>(d_));

    Allocator& alloc = ctx.allocator();
    const int64_t rq = l_ * n_, rk = s_ * n_;
    ones_ = Tensor::empty({std::max<int64_t>({rq, rk, 1})}, DType::float32, alloc);
    fill(ones_.data<float>(), 1.f, ones_.numel(), ctx.stream().get());
    qh_ = Tensor::empty({rq * e_}, DType::float32, alloc);
    kh_ = Tensor::empty({rk * e_}, DType::float32, alloc);
    vh_ = Tensor::empty({rk * e_}, DType::float32, alloc);
    context_ = Tensor::empty({rq * e_}, DType::float32, alloc);
    probs_ = Tensor::empty({n_ * h_ * l_ * s_}, DType::float32, alloc);
  }

  void forward(const KernelArgs& args) override {
    dropping_ = args.training && dropout_ > 0;
    seed_ = args.seed;
    if (n_ * l_ == 0) return;
    const cudaStream_t stream = ctx_.stream().get();
    Allocator& alloc = ctx_.allocator();
    const int64_t rq = l_ * n_, rk = s_ * n_, nh = n_ * h_;
    const float* w_in = args.params[0].data<float>();
    const float* b_in = has_bias_ ? args.params[1].data<float>() : nullptr;
    const float* w_out = args.params[has_bias_ ? 2 : 1].data<float>();
    const float* b_out = has_bias_ ? args.params[3].data<float>() : nullptr;
    const int64_t ee = e_ * e_;

    Tensor rows = Tensor::empty({std::max(rq, rk) * e_}, DType::float32, alloc);
    float* projected = rows.data<float>();
    project(input(args.inputs, 0), rq, w_in, b_in, projected);
    split_heads(heads_shape(l_), projected, qh_.data<float>(), stream);
    project(input(args.inputs, 1), rk, w_in + ee, b_in ? b_in + e_ : nullptr, projected);
    split_heads(heads_shape(s_), projected, kh_.data<float>(), stream);
    project(input(args.inputs, 2), rk, w_in + 2 * ee, b_in ? b_in + 2 * e_ : nullptr, projected);
    split_heads(heads_shape(s_), projected, vh_.data<float>(), stream);

    // scores [N H, L, S] = Q_h K_h^T / sqrt(D), masked, then P = softmax over S
    Tensor scores = Tensor::empty({nh * l_ * s_}, DType::float32, alloc);
    CublasHandle& h = ctx_.cublas();
    gemm_strided_batched(h, {.trans_b = true, .m = l_, .n = s_, .k = d_, .alpha = scale_, .a = qh_.data<float>(),
                             .b = kh_.data<float>(), .c = scores.data<float>()},
                         {.batch = nh, .a = l_ * d_, .b = s_ * d_, .c = l_ * s_});
    apply_attention_masks(masks(args.inputs), n_, h_, l_, s_, scores.data<float>(), stream);
    softmax_forward(false, {.outer = nh * l_, .axis = s_, .inner = 1}, scores.data<float>(), probs_.data<float>(),
                    stream);
    if (dropping_) {
      if (!dropped_.defined()) dropped_ = Tensor::empty(probs_.shape(), DType::float32, alloc);
      dropout_mask_apply(probs_.data<float>(), dropped_.data<float>(), probs_.numel(), static_cast<float>(dropout_),
                         seed_, stream);
    }
    // C_h [N H, L, D] = P' V_h, back to rows, then out = C Wo^T + bo
    Tensor context_h = Tensor::empty({rq * e_}, DType::float32, alloc);
    gemm_strided_batched(h, {.m = l_, .n = d_, .k = s_, .a = weights(), .b = vh_.data<float>(),
                             .c = context_h.data<float>()},
                         {.batch = nh, .a = l_ * s_, .b = s_ * d_, .c = l_ * d_});
    merge_heads(heads_shape(l_), context_h.data<float>(), context_.data<float>(), stream);
    project(context_.data<float>(), rq, w_out, b_out, args.outputs[0].data<float>());
  }

  bool backward_reads_output() const override { return false; }  // Q, K, V, P, C are kept

  void backward(const BackwardArgs& args) override {
    if (n_ * l_ == 0) return;
    const cudaStream_t stream = ctx_.stream().get();
    Allocator& alloc = ctx_.allocator();
    const int64_t rq = l_ * n_, rk = s_ * n_, nh = n_ * h_, ee = e_ * e_;
    const float* w_in = args.params[0].data<float>();
    const float* w_out = args.params[has_bias_ ? 2 : 1].data<float>();
    float* dw_in = grad(args.grad_params, 0);
    float* db_in = has_bias_ ? grad(args.grad_params, 1) : nullptr;
    float* dw_out = grad(args.grad_params, has_bias_ ? 2 : 1);
    float* db_out = has_bias_ ? grad(args.grad_params, 3) : nullptr;
    const float* d_o = args.grad_outputs[0].data<float>();
    CublasHandle& h = ctx_.cublas();

    // the output projection: dWo += dO^T C, dbo += dO^T 1, dC = dO Wo
    if (dw_out) gemm(h, {.trans_a = true, .m = e_, .n = e_, .k = rq, .a = d_o, .b = context_.data<float>(), .beta = 1.f, .c = dw_out});
    if (db_out) gemm(h, {.trans_a = true, .m = e_, .n = 1, .k = rq, .a = d_o, .b = ones_.data<float>(), .beta = 1.f, .c = db_out});
    Tensor rows = Tensor::empty({std::max(rq, rk) * e_}, DType::float32, alloc);
    gemm(h, {.m = rq, .n = e_, .k = e_, .a = d_o, .b = w_out, .c = rows.data<float>()});
    Tensor d_context_h = Tensor::empty({rq * e_}, DType::float32, alloc);
    split_heads(heads_shape(l_), rows.data<float>(), d_context_h.data<float>(), stream);

    // dP = dC_h V_h^T (through the dropout mask), dV_h = P'^T dC_h, dS = softmax_backward
    Tensor d_probs = Tensor::empty({nh * l_ * s_}, DType::float32, alloc);
    Tensor d_vh = Tensor::empty({rk * e_}, DType::float32, alloc);
    gemm_strided_batched(h, {.trans_b = true, .m = l_, .n = s_, .k = d_, .a = d_context_h.data<float>(),
                             .b = vh_.data<float>(), .c = d_probs.data<float>()},
                         {.batch = nh, .a = l_ * d_, .b = s_ * d_, .c = l_ * s_});
    gemm_strided_batched(h, {.trans_a = true, .m = s_, .n = d_, .k = l_, .a = weights(), .b = d_context_h.data<float>(),
                             .c = d_vh.data<float>()},
                         {.batch = nh, .a = l_ * s_, .b = l_ * d_, .c = s_ * d_});
    if (dropping_)
      dropout_mask_apply(d_probs.data<float>(), d_probs.data<float>(), d_probs.numel(), static_cast<float>(dropout_),
                         seed_, stream);
    Tensor d_scores = Tensor::empty({nh * l_ * s_}, DType::float32, alloc);
    softmax_backward(false, {.outer = nh * l_, .axis = s_, .inner = 1}, probs_.data<float>(), d_probs.data<float>(),
                     d_scores.data<float>(), stream);
    if (mask_float_ && args.grad_inputs[static_cast<size_t>(mask_slot_)].defined()) {
      float* d_mask = args.grad_inputs[static_cast<size_t>(mask_slot_)].data<float>();
      if (mask_per_head_)
        TANDEM_CUDA_CHECK(cudaMemcpyAsync(d_mask, d_scores.data<float>(), d_scores.nbytes(), cudaMemcpyDeviceToDevice, stream));
      else
        attention_mask_grad_shared(d_scores.data<float>(), nh, l_ * s_, d_mask, stream);
    }
    // dQ_h = dS K_h / sqrt(D), dK_h = dS^T Q_h / sqrt(D)
    Tensor d_qh = Tensor::empty({rq * e_}, DType::float32, alloc);
    Tensor d_kh = Tensor::empty({rk * e_}, DType::float32, alloc);
    gemm_strided_batched(h, {.m = l_, .n = d_, .k = s_, .alpha = scale_, .a = d_scores.data<float>(),
                             .b = kh_.data<float>(), .c = d_qh.data<float>()},
                         {.batch = nh, .a = l_ * s_, .b = s_ * d_, .c = l_ * d_});
    gemm_strided_batched(h, {.trans_a = true, .m = s_, .n = d_, .k = l_, .alpha = scale_, .a = d_scores.data<float>(),
                             .b = qh_.data<float>(), .c = d_kh.data<float>()},
                         {.batch = nh, .a = l_ * s_, .b = l_ * d_, .c = s_ * d_});

    // the three input projections: dW += dP^T x, db += dP^T 1, dx = dP W (self-attention:
    // the three summed into the one input)
    const float* d_heads[3] = {d_qh.data<float>(), d_kh.data<float>(), d_vh.data<float>()};
    for (int p = 0; p < 3; ++p) {
      const int64_t r = p == 0 ? rq : rk;
      merge_heads(heads_shape(p == 0 ? l_ : s_), d_heads[p], rows.data<float>(), stream);
      const float* d_proj = rows.data<float>();
      const float* x = input(args.inputs, p);
      if (dw_in) gemm(h, {.trans_a = true, .m = e_, .n = e_, .k = r, .a = d_proj, .b = x, .beta = 1.f, .c = dw_in + p * ee});
      if (db_in)
        gemm(h, {.trans_a = true, .m = e_, .n = 1, .k = r, .a = d_proj, .b = ones_.data<float>(), .beta = 1.f,
                 .c = db_in + p * e_});
      const size_t slot = static_cast<size_t>(qkv_ == 1 ? 0 : p);
      if (!args.grad_inputs[slot].defined()) continue;
      gemm(h, {.m = r, .n = e_, .k = e_, .a = d_proj, .b = w_in + p * ee, .beta = qkv_ == 1 && p > 0 ? 1.f : 0.f,
               .c = args.grad_inputs[slot].data<float>()});
    }
  }

 private:
  HeadsShape heads_shape(int64_t length) const {
    return {.batch = n_, .length = length, .heads = h_, .dim = d_, .batch_first = batch_first_};
  }

  /// out [rows, E] = x [rows, E] W^T (+ 1 b^T): a projection with W [E, E].
  void project(const float* x, int64_t rows, const float* w, const float* b, float* out) {
    CublasHandle& h = ctx_.cublas();
    float beta = 0.f;
    if (b) {
      gemm(h, {.m = rows, .n = e_, .k = 1, .a = ones_.data<float>(), .b = b, .c = out});
      beta = 1.f;
    }
    gemm(h, {.trans_b = true, .m = rows, .n = e_, .k = e_, .a = x, .b = w, .beta = beta, .c = out});
  }

  AttentionMasks masks(std::span<const Tensor> inputs) const {
    AttentionMasks m;
    m.causal = causal_;
    if (kpm_slot_ >= 0) m.key_padding = inputs[static_cast<size_t>(kpm_slot_)].data<int64_t>();
    if (mask_slot_ >= 0) {
      const Tensor& mask = inputs[static_cast<size_t>(mask_slot_)];
      if (mask_float_) m.float_mask = mask.data<float>();
      else m.int_mask = mask.data<int64_t>();
      m.per_head = mask_per_head_;
    }
    return m;
  }

  /// The attention weights the values were averaged with: P, or P' after dropout.
  const float* weights() const { return dropping_ ? dropped_.data<float>() : probs_.data<float>(); }

  /// query, key or value (p = 0, 1, 2); all the first input in self-attention.
  const float* input(std::span<const Tensor> inputs, int p) const {
    return inputs[static_cast<size_t>(qkv_ == 1 ? 0 : p)].data<float>();
  }

  static float* grad(std::span<Tensor> grads, size_t i) { return grads[i].defined() ? grads[i].data<float>() : nullptr; }

  CudaContext& ctx_;
  int64_t e_ = 0, h_ = 1, d_ = 0, n_ = 0, l_ = 0, s_ = 0, qkv_ = 3;
  int64_t kpm_slot_ = -1, mask_slot_ = -1;
  bool mask_float_ = false, mask_per_head_ = false;
  bool has_bias_ = true, batch_first_ = false, causal_ = false;
  double dropout_ = 0;
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
