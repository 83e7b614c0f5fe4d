// multi_head_attention: query [L, N, E], key and value [S, N, E] ([N, L, E] / [N, S, E]
// with batch_first; query alone for self-attention), then the masks the attribute `masks`
// names: key_padding_mask int64 [N, S] (nonzero: ignore that key), attn_mask [L, S] or
// [N * heads, L, S] (float32: added; int64: nonzero masks) -> [L, N, E], torch's
// MultiheadAttention(...)(q, k, v, need_weights=False)[0]. Parameters, torch's:
// in_proj_weight [3E, E] (q, k, v rows), in_proj_bias [3E], out_proj.weight [E, E], out_proj.bias [E].
//
//   Q = q Wq^T + bq, K = k Wk^T + bk, V = v Wv^T + bv          [rows, E], the input's row order
//   P = softmax(Q_h K_h^T / sqrt(D) + mask)                    [N, H, L, S], D = E / H
//   C_h = P V_h;  out = C Wo^T + bo
// Every product is a oneDNN matmul (StridedMatmul): a head h of Q is the view
// [N, H, L, D] of the [rows, E] projection through strides, so heads are never copied.
// Masks are added by a loop (-inf where masked; `causal` masks s > l), softmax is oneDNN's.
//
// Backward (dO the output's gradient; parameter gradients accumulate):
//   dWo += dO^T C, dbo += sum dO, dC = dO Wo
//   dP = dC_h V_h^T, dV_h = P^T dC_h, dS = softmax_backward(P, dP)
//   dQ_h = dS K_h / sqrt(D), dK_h = dS^T Q_h / sqrt(D)
//   dW{q,k,v} += d{Q,K,V}^T {q,k,v}, db += sum, d{q,k,v} = d{Q,K,V} W{q,k,v}  (self-attention: summed)
//   a float attn_mask gets dS (summed over N and H for [L, S]).
// Forward keeps Q, K, V, P and C in the kernel (the last forward's, as max_pool2d keeps its
// workspace); backward reads the inputs, not the output.
//
// `dropout` (training only, as torch; inference ignores it) drops the attention weights:
// C_h = P' V_h with P' = P * keep / (1 - p), the mask apply_dropout(seed) over P's
// [N, H, L, S] elements. Backward: dV_h = P'^T dC_h, and dP = mask * (dC_h V_h^T) / (1 - p)
// before the softmax's backward (which reads P).
//
// In bf16 (precision: bf16 on a CPU with avx512_bf16), as torch.autocast runs
// MultiheadAttention on the cpu: every product above takes bf16 copies of its two
// operands (the inputs, the weights, Q, K, V, P, C and the gradients they meet in
// backward, rounded to nearest even) and accumulates in fp32; the masks, the softmax and
// its backward, dropout, the bias sums and everything kept or written stay fp32 (torch
// rounds each product's output to bf16; Tandem keeps the fp32 accumulator). The weights'
// copies are cast from the fp32 masters only when those changed since the last cast
// (params_version and their storage: DerivedParams), as linear keeps its cast weight, into
// the copies the weights' storages keep, which the optimizer writes as it updates them.
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/attention_plan.h"
#include "backends/cpu/cpu_precision.h"
#include "backends/cpu/ops/apply_dropout.h"
#include "backends/cpu/ops/bf16_cast.h"
#include "backends/cpu/ops/derived_params.h"
#include "backends/cpu/ops/op_factories.h"
#include "backends/cpu/ops/op_util.h"
#include "backends/cpu/ops/strided_matmul.h"

namespace tandem {
namespace {

using dnnl::memory;
using cpu::MatView;
using cpu::StridedMatmul;

class AttentionKernel final : public Kernel {
 public:
  AttentionKernel(CpuContext& ctx, const KernelSpec& spec)
      : ctx_(ctx), p_(plan_attention(spec)), bf16_(cpu::kernel_precision(spec).precision == Precision::bf16) {
    const int64_t rq = p_.l * p_.n, rk = p_.s * p_.n, e = p_.e;
    const float scale = 1.f / std::sqrt(static_cast<float>(p_.d));
    const auto t = bf16_ ? memory::data_type::bf16 : memory::data_type::f32;  // the products' operands

    // projections: rows [r, E] times W^T, W [out, in] read transposed through strides
    const MatView wt{{e, e}, {1, e}}, w{{e, e}, {e, 1}};
    const MatView xq{{rq, e}, {e, 1}}, xk{{rk, e}, {e, 1}};
    proj_q_ = StridedMatmul(ctx, xq, wt, xq, 1.f, false, p_.has_bias, t);
    proj_k_ = StridedMatmul(ctx, xk, wt, xk, 1.f, false, p_.has_bias, t);
    // scores [N, H, L, S] = Q_h K_h^T
    const MatView qh = heads(p_.l), kh = heads(p_.s), kt = heads_t(p_.s);
    const MatView scores{{p_.n, p_.heads, p_.l, p_.s}, {p_.heads * p_.l * p_.s, p_.l * p_.s, p_.s, 1}};
    const MatView scores_t{{p_.n, p_.heads, p_.s, p_.l}, {p_.heads * p_.l * p_.s, p_.l * p_.s, 1, p_.s}};
    qk_ = StridedMatmul(ctx, qh, kt, scores, scale, false, false, t);
    pv_ = StridedMatmul(ctx, scores, kh, qh, 1.f, false, false, t);
    // backward
    const MatView xq_t{{e, rq}, {1, e}}, xk_t{{e, rk}, {1, e}};
    dw_q_ = StridedMatmul(ctx, xq_t, xq, {{e, e}, {e, 1}}, 1.f, true, false, t);
    dw_k_ = StridedMatmul(ctx, xk_t, xk, {{e, e}, {e, 1}}, 1.f, true, false, t);
    dx_q_ = StridedMatmul(ctx, xq, w, xq, 1.f, false, false, t);
    dx_k_ = StridedMatmul(ctx, xk, w, xk, 1.f, p_.qkv == 1, false, t);  // self-attention: add to dq
    dp_ = StridedMatmul(ctx, qh, kt, scores, 1.f, false, false, t);        // dC_h V_h^T
    dv_ = StridedMatmul(ctx, scores_t, qh, kh, 1.f, false, false, t);      // P^T dC_h
    dq_ = StridedMatmul(ctx, scores, kh, qh, scale, false, false, t);      // dS K_h
    dk_ = StridedMatmul(ctx, scores_t, qh, kh, scale, false, false, t);    // dS^T Q_h

    memory::desc md({p_.n * p_.heads * p_.l, p_.s}, memory::data_type::f32, memory::format_tag::ab);
    const std::string key = cpu::spec_key(spec);
    dnnl::softmax_forward::primitive_desc fwd_pd(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_training, md, 1), user_scratchpad_attr(), ctx.engine());
    softmax_ = cpu::DnnlCall(ctx.cached_primitive(key + "#softmax", [&] { return dnnl::softmax_forward(fwd_pd); }));
    sm_src_ = softmax_.bind(DNNL_ARG_SRC, md, ctx.engine());
    sm_dst_ = softmax_.bind(DNNL_ARG_DST, md, ctx.engine());
    softmax_bwd_ = cpu::DnnlCall(ctx.cached_primitive(key + "#softmax_bwd", [&] {
      return dnnl::softmax_backward(
          dnnl::softmax_backward::primitive_desc(dnnl::softmax_backward::desc(md, md, 1), user_scratchpad_attr(), ctx.engine(),
                                                 fwd_pd));
    }));
    smb_dst_ = softmax_bwd_.bind(DNNL_ARG_DST, md, ctx.engine());
    smb_ddst_ = softmax_bwd_.bind(DNNL_ARG_DIFF_DST, md, ctx.engine());
    smb_dsrc_ = softmax_bwd_.bind(DNNL_ARG_DIFF_SRC, md, ctx.engine());

    qp_.resize(static_cast<size_t>(rq * e));
    kp_.resize(static_cast<size_t>(rk * e));
    vp_.resize(kp_.size());
    ctx_buf_.resize(qp_.size());
    probs_.resize(static_cast<size_t>(p_.n * p_.heads * p_.l * p_.s));
  }

  void forward(const KernelArgs& args) override {
    dropping_ = args.training && p_.dropout > 0;
    seed_ = args.seed;
    const float* b_in = p_.has_bias ? args.params[1].data<float>() : nullptr;
    const float* b_out = p_.has_bias ? args.params[3].data<float>() : nullptr;
    const int64_t ee = p_.e * p_.e;
    const WeightOperands w16 = weight_operands(args.params, args.params_version);
    const void* w_in16 = w16.in;
    const void* x[3];
    inputs_as_operands(args.inputs, x);
    proj_q_.run(x[0], w_in16, qp_.data(), b_in);
    proj_k_.run(x[1], at(w_in16, ee), kp_.data(), b_in ? b_in + p_.e : nullptr);
    proj_k_.run(x[2], at(w_in16, 2 * ee), vp_.data(), b_in ? b_in + 2 * p_.e : nullptr);
    scores_.resize(probs_.size());
    qp16_ = operand(qp_.data(), qp_.size(), qp_bf16_);
    kp16_ = operand(kp_.data(), kp_.size(), kp_bf16_);
    vp16_ = operand(vp_.data(), vp_.size(), vp_bf16_);
    qk_.run(qp16_, kp16_, scores_.data());
    apply_masks(args.inputs, scores_.data());
    softmax_.set(sm_src_, scores_.data());
    softmax_.set(sm_dst_, probs_.data());
    softmax_.run(ctx_);
    if (dropping_) {
      dropped_.resize(probs_.size());
      cpu::apply_dropout(probs_.data(), dropped_.data(), static_cast<int64_t>(probs_.size()), seed_,
                         static_cast<float>(p_.dropout));
    }
    weights16_ = operand(weights(), probs_.size(), weights_bf16_);
    pv_.run(weights16_, vp16_, ctx_buf_.data());
    ctx16_ = operand(ctx_buf_.data(), ctx_buf_.size(), ctx_bf16_);
    // same shapes as Q's projection
    proj_q_.run(ctx16_, w16.out, args.outputs[0].data<float>(), b_out);
  }

  bool backward_reads_output() const override { return false; }  // Q, K, V, P, C are kept

  void backward(const BackwardArgs& args) override {
    float* dw_in = grad(args.grad_params, 0);
    float* db_in = p_.has_bias ? grad(args.grad_params, 1) : nullptr;
    float* dw_out = grad(args.grad_params, p_.has_bias ? 2 : 1);
    float* db_out = p_.has_bias ? grad(args.grad_params, 3) : nullptr;
    const float* d_o = args.grad_outputs[0].data<float>();
    const int64_t rq = p_.l * p_.n, rk = p_.s * p_.n, ee = p_.e * p_.e;
    const void* d_o16 = operand(d_o, rq * p_.e, grad_bf16_[0]);
    const WeightOperands w16 = weight_operands(args.params, args.params_version);

    if (dw_out) dw_q_.run(d_o16, ctx16_, dw_out);  // dWo += dO^T C (C has Q's rows)
    if (db_out) column_sums(d_o, rq, db_out);
    d_ctx_.resize(ctx_buf_.size());
    dx_q_.run(d_o16, w16.out, d_ctx_.data());  // dC = dO Wo
    d_scores_.resize(probs_.size());
    d_probs_.resize(probs_.size());
    const void* d_ctx16 = operand(d_ctx_.data(), d_ctx_.size(), grad_bf16_[1]);
    dp_.run(d_ctx16, vp16_, d_probs_.data());
    d_vp_.resize(vp_.size());
    dv_.run(weights16_, d_ctx16, d_vp_.data());
    if (dropping_)  // dP' -> dP through the same mask
      cpu::apply_dropout(d_probs_.data(), d_probs_.data(), static_cast<int64_t>(d_probs_.size()), seed_,
                         static_cast<float>(p_.dropout));
    softmax_bwd_.set(smb_dst_, probs_.data());
    softmax_bwd_.set(smb_ddst_, d_probs_.data());
    softmax_bwd_.set(smb_dsrc_, d_scores_.data());
    softmax_bwd_.run(ctx_);
    if (p_.mask_float && args.grad_inputs[static_cast<size_t>(p_.mask_slot)].defined())
      mask_grad(args.grad_inputs[static_cast<size_t>(p_.mask_slot)].data<float>());
    d_qp_.resize(qp_.size());
    d_kp_.resize(kp_.size());
    const void* d_scores16 = operand(d_scores_.data(), d_scores_.size(), grad_bf16_[1]);  // over dC's, read no more
    dq_.run(d_scores16, kp16_, d_qp_.data());
    dk_.run(d_scores16, qp16_, d_kp_.data());

    // the three projections: parameters, then inputs (self-attention sums into one); the
    // inputs' copies are made again, as the fp32 path reads them from args
    const void* w_in16 = w16.in;
    const void* x[3];
    inputs_as_operands(args.inputs, x);
    const float* dproj[3] = {d_qp_.data(), d_kp_.data(), d_vp_.data()};
    for (int p = 0; p < 3; ++p) {
      const void* dproj16 = operand(dproj[p], (p == 0 ? rq : rk) * p_.e, grad_bf16_[0]);
      StridedMatmul& dw = p == 0 ? dw_q_ : dw_k_;
      if (dw_in) dw.run(dproj16, x[p], dw_in + p * ee);
      if (db_in) column_sums(dproj[p], p == 0 ? rq : rk, db_in + p * p_.e);
      const size_t slot = static_cast<size_t>(p_.qkv == 1 ? 0 : p);
      if (!args.grad_inputs[slot].defined()) continue;
      (p == 0 ? dx_q_ : dx_k_).run(dproj16, at(w_in16, p * ee), args.grad_inputs[slot].data<float>());
    }
  }

 private:
  /// The view [N, H, X, D] of the heads of a projected [rows, E] tensor of X positions.
  MatView heads(int64_t x) const {
    const dnnl::memory::dims dims{p_.n, p_.heads, x, p_.d};
    return p_.batch_first ? MatView{dims, {x * p_.e, p_.d, p_.e, 1}} : MatView{dims, {p_.e, p_.d, p_.n * p_.e, 1}};
  }
  /// The same heads transposed: [N, H, D, X].
  MatView heads_t(int64_t x) const {
    const dnnl::memory::dims dims{p_.n, p_.heads, p_.d, x};
    return p_.batch_first ? MatView{dims, {x * p_.e, p_.d, 1, p_.e}} : MatView{dims, {p_.e, p_.d, 1, p_.n * p_.e}};
  }

  /// The attention weights the values were averaged with: P, or P' after dropout.
  const float* weights() const { return dropping_ ? dropped_.data() : probs_.data(); }

  /// query, key or value (p = 0, 1, 2); all the first input in self-attention.
  const float* input(std::span<const Tensor> inputs, int p) const {
    return inputs[static_cast<size_t>(p_.qkv == 1 ? 0 : p)].data<float>();
  }

  static float* grad(std::span<Tensor> grads, size_t i) { return grads[i].defined() ? grads[i].data<float>() : nullptr; }

  /// `src` (n floats) as the products read it: itself in fp32; in bf16 its copy, cast into `copy`.
  const void* operand(const float* src, int64_t n, std::vector<uint16_t>& copy) const {
    if (!bf16_) return src;
    copy.resize(static_cast<size_t>(n));
    cpu::cast_to_bf16(src, copy.data(), n);
    return copy.data();
  }
  struct WeightOperands {
    const void* in;   // W_in [3 E, E]
    const void* out;  // W_out [E, E]
  };
  /// The weights as the products read them: themselves in fp32; in bf16 their copies, cast
  /// again only when the weights changed since (DerivedParams): the copies their storages
  /// keep, which the optimizer writes as it updates them (Note [a weight's bf16 copy] in
  /// core/bf16_copy.h), or this kernel's own.
  WeightOperands weight_operands(std::span<const Tensor> params, uint64_t version) {
    const Tensor& w_in = params[0];
    const Tensor& w_out = params[p_.has_bias ? 2 : 1];
    if (!bf16_) return {w_in.data<float>(), w_out.data<float>()};
    if (!weights16_for_.current(version, params)) {
      params16_ = {bf16_weight(w_in, version, w_in16_), bf16_weight(w_out, version, w_out16_)};
      weights16_for_.mark(version, params);
    }
    return params16_;
  }
  const void* bf16_weight(const Tensor& w, uint64_t version, std::vector<uint16_t>& own) const {
    if (const uint16_t* kept = cpu::kept_bf16_weight(w, version)) return kept;
    return operand(w.data<float>(), w.numel(), own);
  }
  /// The operand `elements` elements past `base`.
  const void* at(const void* base, int64_t elements) const {
    return static_cast<const char*>(base) + elements * (bf16_ ? 2 : 4);
  }
  /// query, key and value as operands (self-attention: one input, cast once).
  void inputs_as_operands(std::span<const Tensor> inputs, const void* (&x)[3]) {
    const int64_t rq = p_.l * p_.n, rk = p_.s * p_.n;
    x[0] = operand(input(inputs, 0), rq * p_.e, x_bf16_[0]);
    for (int p = 1; p < 3; ++p) x[p] = p_.qkv == 1 ? x[0] : operand(input(inputs, p), rk * p_.e, x_bf16_[p]);
  }

  /// out[j] += sum over rows of x[r, j].
  void column_sums(const float* x, int64_t rows, float* out) const {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < p_.e; ++j) out[j] += x[r * p_.e + j];
  }

  /// Adds attn_mask, key_padding_mask and the causal mask to scores [N, H, L, S].
  void apply_masks(std::span<const Tensor> inputs, float* scores) const {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const int64_t* kpm =
        p_.key_padding_slot >= 0 ? inputs[static_cast<size_t>(p_.key_padding_slot)].data<int64_t>() : nullptr;
    const Tensor* mask = p_.mask_slot >= 0 ? &inputs[static_cast<size_t>(p_.mask_slot)] : nullptr;
    if (!kpm && !mask && !p_.causal) return;
    const int64_t n_rows = p_.n * p_.heads;
    cpu::parallel_for(n_rows, p_.l * p_.s, [&](int64_t begin, int64_t end) {
      for (int64_t nh = begin; nh < end; ++nh) {
        const int64_t n = nh / p_.heads;
        for (int64_t l = 0; l < p_.l; ++l) {
          float* row = scores + (nh * p_.l + l) * p_.s;
          const int64_t m_off = ((p_.mask_per_head ? nh * p_.l : 0) + l) * p_.s;
          for (int64_t s = 0; s < p_.s; ++s) {
            if (mask) {
              if (p_.mask_float) row[s] += mask->data<float>()[m_off + s];
              else if (mask->data<int64_t>()[m_off + s] != 0) row[s] = neg_inf;
            }
            if (kpm && kpm[n * p_.s + s] != 0) row[s] = neg_inf;
            if (p_.causal && s > l) row[s] = neg_inf;
          }
        }
      }
    });
  }

  /// The gradient of a float attn_mask: dS, summed over N and H when it is [L, S].
  void mask_grad(float* dm) const {
    const int64_t ls = p_.l * p_.s;
    if (p_.mask_per_head) {
      std::memcpy(dm, d_scores_.data(), d_scores_.size() * sizeof(float));
      return;
    }
    std::fill(dm, dm + ls, 0.f);
    for (int64_t nh = 0; nh < p_.n * p_.heads; ++nh)
      for (int64_t i = 0; i < ls; ++i) dm[i] += d_scores_[static_cast<size_t>(nh * ls + i)];
  }

  CpuContext& ctx_;
  const AttentionPlan p_;  // shapes, masks and options
  const bool bf16_;        // the products' operands are bf16 copies (above)
  bool dropping_ = false;  // the last forward dropped attention weights (backward follows it)
  uint64_t seed_ = 0;      // ... with this seed
  StridedMatmul proj_q_, proj_k_, qk_, pv_, dw_q_, dw_k_, dx_q_, dx_k_, dp_, dv_, dq_, dk_;
  cpu::DnnlCall softmax_, softmax_bwd_;
  size_t sm_src_ = 0, sm_dst_ = 0, smb_dst_ = 0, smb_ddst_ = 0, smb_dsrc_ = 0;
  std::vector<float> qp_, kp_, vp_, scores_, probs_, dropped_, ctx_buf_;  // the last forward's
  std::vector<float> d_ctx_, d_probs_, d_scores_, d_qp_, d_kp_, d_vp_;  // backward scratch
  // bf16 only: the operands' copies. The last forward's Q, K, V, P' and C are read again by
  // backward (through the pointers below, the fp32 buffers themselves in fp32).
  std::vector<uint16_t> x_bf16_[3], w_in16_, w_out16_, qp_bf16_, kp_bf16_, vp_bf16_, weights_bf16_, ctx_bf16_;
  std::vector<uint16_t> grad_bf16_[2];  // backward's: two in use at once at most
  WeightOperands params16_{};           // W_in and W_out in bf16, as the products read them
  cpu::DerivedParams weights16_for_;    // what params16_ were cast from
  const void* qp16_ = nullptr;
  const void* kp16_ = nullptr;
  const void* vp16_ = nullptr;
  const void* weights16_ = nullptr;
  const void* ctx16_ = nullptr;
};

}  // namespace

std::unique_ptr<Kernel> make_multi_head_attention_kernel(CpuContext& ctx, const KernelSpec& spec) {
  return std::make_unique<AttentionKernel>(ctx, spec);
}

}  // namespace tandem
