#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/optimizer.cuh"

namespace tandem::cuda {
namespace {

using optim_detail::AdamScalars;
using optim_detail::SgdScalars;

template <bool kWeightDecay, bool kMomentum, bool kNesterov, bool kFirst>
__global__ void sgd_kernel(SgdScalars s, float* __restrict__ p, const float* __restrict__ g, float* __restrict__ buf,
                           int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    float d_p = g[i];
    if constexpr (kWeightDecay) d_p = __fmaf_rn(p[i], s.weight_decay, d_p);  // d_p.add(p, alpha=wd)
    if constexpr (kMomentum) {
      // buf = clone(d_p), or buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
      const float b = kFirst ? d_p : __fmaf_rn(d_p, s.one_minus_dampening, __fmul_rn(buf[i], s.momentum));
      buf[i] = b;
      d_p = kNesterov ? __fmaf_rn(b, s.momentum, d_p) : b;  // d_p.add(buf, alpha=momentum)
    }
    p[i] = __fmaf_rn(d_p, s.neg_lr, p[i]);  // p.add_(d_p, alpha=-lr)
  }
}

template <bool kL2, bool kDecoupled>
__global__ void adam_kernel(AdamScalars s, float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    float grad = g[i];
    if constexpr (kL2) grad = __fmaf_rn(p[i], s.l2, grad);  // grad.add(p, alpha=weight_decay)
    float param = p[i];
    if constexpr (kDecoupled) param = __fmul_rn(param, s.decay);  // p.mul_(1 - lr * weight_decay)
    const float exp_avg = __fmaf_rn(grad, s.one_minus_beta1, __fmul_rn(m[i], s.beta1));
    const float exp_avg_sq = __fmaf_rn(__fmul_rn(s.one_minus_beta2, grad), grad, __fmul_rn(v[i], s.beta2));
    m[i] = exp_avg;
    v[i] = exp_avg_sq;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(exp_avg_sq), s.bias_correction2_sqrt), s.eps);
    p[i] = __fadd_rn(param, __fdiv_rn(__fmul_rn(s.neg_step_size, exp_avg), denom));  // p.addcdiv_(m, denom, -step)
  }
}

template <bool... Flags>
void launch_sgd(const SgdScalars& s, float* p, const float* g, float* buf, int64_t n, cudaStream_t stream) {
  sgd_kernel<Flags...><<<grid_for(n), kBlockSize, 0, stream>>>(s, p, g, buf, n);
}

/// Picks the instance of the template for the run-time flags.
template <bool... Fixed>
void dispatch_sgd(const SgdScalars& s, float* p, const float* g, float* buf, int64_t n, bool first,
                  cudaStream_t stream) {
  constexpr size_t kFixed = sizeof...(Fixed);
  if constexpr (kFixed == 4) {
    launch_sgd<Fixed...>(s, p, g, buf, n, stream);
  } else {
    const bool flags[4] = {s.has_weight_decay, s.has_momentum, s.nesterov, first};
    if (flags[kFixed]) dispatch_sgd<Fixed..., true>(s, p, g, buf, n, first, stream);
    else dispatch_sgd<Fixed..., false>(s, p, g, buf, n, first, stream);
  }
}

}  // namespace

void sgd_update(const SgdScalars& s, float* p, const float* g, float* buf, int64_t n, bool first,
                cudaStream_t stream) {
  if (n == 0) return;
  dispatch_sgd<>(s, p, g, buf, n, first, stream);
  TANDEM_CUDA_CHECK_LAUNCH("sgd_update");
}

void adam_update(const AdamScalars& s, float* p, const float* g, float* m, float* v, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (s.l2 != 0)
    adam_kernel<true, false><<<grid_for(n), kBlockSize, 0, stream>>>(s, p, g, m, v, n);
  else if (s.decay != 1)
    adam_kernel<false, true><<<grid_for(n), kBlockSize, 0, stream>>>(s, p, g, m, v, n);
  else
    adam_kernel<false, false><<<grid_for(n), kBlockSize, 0, stream>>>(s, p, g, m, v, n);
  TANDEM_CUDA_CHECK_LAUNCH("adam_update");
}

}  // namespace tandem::cuda
