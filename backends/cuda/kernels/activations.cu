#include "backends/cuda/kernels/activations.cuh"
#include "backends/cuda/kernels/launch.cuh"

namespace tandem::cuda {
namespace {

constexpr float kSqrtHalf = 0.70710678118654752f;      // 1/sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;    // 1/sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536f;   // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

/// relu6(x + 3) / 6's numerator, the gate of hardswish and hardsigmoid.
__device__ inline float hard_gate6(float x) { return fminf(fmaxf(x + 3.f, 0.f), 6.f); }

__device__ inline float softplus(float x) { return log1pf(expf(x)); }

__device__ inline float logistic(float x) { return 1.f / (1.f + expf(-x)); }

template <Activation A>
__device__ inline float apply(float x) {
  if constexpr (A == Activation::relu) return x < 0.f ? 0.f : x;
  if constexpr (A == Activation::tanh) return tanhf(x);
  if constexpr (A == Activation::sigmoid) return 1.f / (1.f + expf(-x));
  if constexpr (A == Activation::gelu_erf) return 0.5f * x * (1.f + erff(x * kSqrtHalf));
  if constexpr (A == Activation::gelu_tanh)
    return 0.5f * x * (1.f + tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
  if constexpr (A == Activation::relu6) return x < 0.f ? 0.f : (x > 6.f ? 6.f : x);
  if constexpr (A == Activation::hardswish) return x * hard_gate6(x) / 6.f;
  if constexpr (A == Activation::hardsigmoid) return hard_gate6(x) / 6.f;
  if constexpr (A == Activation::silu) return x / (1.f + expf(-x));
  if constexpr (A == Activation::mish) return x * tanhf(softplus(x));
  if constexpr (A == Activation::exp) return expf(x);
  return x;
}

template <Activation A>
__device__ inline float apply_grad(float x, float y, float g) {
  if constexpr (A == Activation::relu) return y > 0.f ? g : 0.f;
  if constexpr (A == Activation::tanh) return g * (1.f - y * y);
  if constexpr (A == Activation::sigmoid) return g * y * (1.f - y);
  if constexpr (A == Activation::gelu_erf) {
    const float cdf = 0.5f * (1.f + erff(x * kSqrtHalf));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
    return g * (cdf + x * pdf);
  }
  if constexpr (A == Activation::gelu_tanh) {
    const float x_sq = x * x;
    const float t = tanhf(kSqrt2OverPi * (x + kGeluCubic * x_sq * x));
    const float left = 0.5f * (1.f + t);
    const float right = 0.5f * x * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kGeluCubic * x_sq);
    return g * (left + right);
  }
  if constexpr (A == Activation::relu6) return y > 0.f && y < 6.f ? g : 0.f;
  if constexpr (A == Activation::hardswish) return x < -3.f ? 0.f : (x <= 3.f ? g * (x / 3.f + 0.5f) : g);
  if constexpr (A == Activation::hardsigmoid) return x > -3.f && x < 3.f ? g / 6.f : 0.f;
  if constexpr (A == Activation::silu) {
    const float s = logistic(x);
    return g * s * (1.f + x * (1.f - s));
  }
  if constexpr (A == Activation::mish) {
    const float t = tanhf(softplus(x));
    return g * (t + x * logistic(x) * (1.f - t * t));
  }
  if constexpr (A == Activation::exp) return g * y;
  return g;
}

template <Activation A>
__global__ void forward_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] = apply<A>(x[i]);
}

template <Activation A>
__global__ void backward_kernel(const float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ dy,
                                float* __restrict__ dx, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    constexpr bool kFromOutput =  // activation_grad_from_output(A), which device code may not call
        A == Activation::relu || A == Activation::tanh || A == Activation::sigmoid || A == Activation::relu6 ||
        A == Activation::exp;
    const float xi = kFromOutput ? 0.f : x[i];
    const float yi = kFromOutput ? y[i] : 0.f;
    dx[i] = apply_grad<A>(xi, yi, dy[i]);
  }
}

template <Activation A>
void launch_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  forward_kernel<A><<<grid_for(n), kBlockSize, 0, stream>>>(x, y, n);
}

template <Activation A>
void launch_backward(const float* x, const float* y, const float* dy, float* dx, int64_t n, cudaStream_t stream) {
  backward_kernel<A><<<grid_for(n), kBlockSize, 0, stream>>>(x, y, dy, dx, n);
}

__global__ void clamp_forward_kernel(float lo, float hi, const float* __restrict__ x, float* __restrict__ y,
                                     int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] = fminf(fmaxf(x[i], lo), hi);
}

__global__ void clamp_backward_kernel(float lo, float hi, const float* __restrict__ x, const float* __restrict__ dy,
                                      float* __restrict__ dx, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) dx[i] = x[i] >= lo && x[i] <= hi ? dy[i] : 0.f;
}

}  // namespace

void clamp_forward(float lo, float hi, const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  clamp_forward_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(lo, hi, x, y, n);
  TANDEM_CUDA_CHECK_LAUNCH("clamp_forward");
}

void clamp_backward(float lo, float hi, const float* x, const float* dy, float* dx, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  clamp_backward_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(lo, hi, x, dy, dx, n);
  TANDEM_CUDA_CHECK_LAUNCH("clamp_backward");
}

void activation_forward(Activation act, const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  switch (act) {
    case Activation::relu: launch_forward<Activation::relu>(x, y, n, stream); break;
    case Activation::tanh: launch_forward<Activation::tanh>(x, y, n, stream); break;
    case Activation::sigmoid: launch_forward<Activation::sigmoid>(x, y, n, stream); break;
    case Activation::gelu_erf: launch_forward<Activation::gelu_erf>(x, y, n, stream); break;
    case Activation::gelu_tanh: launch_forward<Activation::gelu_tanh>(x, y, n, stream); break;
    case Activation::relu6: launch_forward<Activation::relu6>(x, y, n, stream); break;
    case Activation::hardswish: launch_forward<Activation::hardswish>(x, y, n, stream); break;
    case Activation::hardsigmoid: launch_forward<Activation::hardsigmoid>(x, y, n, stream); break;
    case Activation::silu: launch_forward<Activation::silu>(x, y, n, stream); break;
    case Activation::mish: launch_forward<Activation::mish>(x, y, n, stream); break;
    case Activation::exp: launch_forward<Activation::exp>(x, y, n, stream); break;
  }
  TANDEM_CUDA_CHECK_LAUNCH("activation_forward");
}

void activation_backward(Activation act, const float* x, const float* y, const float* dy, float* dx, int64_t n,
                         cudaStream_t stream) {
  if (n == 0) return;
  switch (act) {
    case Activation::relu: launch_backward<Activation::relu>(x, y, dy, dx, n, stream); break;
    case Activation::tanh: launch_backward<Activation::tanh>(x, y, dy, dx, n, stream); break;
    case Activation::sigmoid: launch_backward<Activation::sigmoid>(x, y, dy, dx, n, stream); break;
    case Activation::gelu_erf: launch_backward<Activation::gelu_erf>(x, y, dy, dx, n, stream); break;
    case Activation::gelu_tanh: launch_backward<Activation::gelu_tanh>(x, y, dy, dx, n, stream); break;
    case Activation::relu6: launch_backward<Activation::relu6>(x, y, dy, dx, n, stream); break;
    case Activation::hardswish: launch_backward<Activation::hardswish>(x, y, dy, dx, n, stream); break;
    case Activation::hardsigmoid: launch_backward<Activation::hardsigmoid>(x, y, dy, dx, n, stream); break;
    case Activation::silu: launch_backward<Activation::silu>(x, y, dy, dx, n, stream); break;
    case Activation::mish: launch_backward<Activation::mish>(x, y, dy, dx, n, stream); break;
    case Activation::exp: launch_backward<Activation::exp>(x, y, dy, dx, n, stream); break;
  }
  TANDEM_CUDA_CHECK_LAUNCH("activation_backward");
}

}  // namespace tandem::cuda
