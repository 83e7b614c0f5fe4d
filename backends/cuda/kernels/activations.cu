#include "backends/cuda/kernels/activations.cuh"
#include "backends/cuda/kernels/launch.cuh"

namespace tandem::cuda {
namespace {

constexpr float kSqrtHalf = 0.70710678118654752f;      // 1/sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;    // 1/sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536f;   // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

template <Activation A>
__device__ inline float apply(float x) {
  if constexpr (A == Activation::relu) return x < 0.f ? 0.f : x;
  if constexpr (A == Activation::tanh) return tanhf(x);
  if constexpr (A == Activation::sigmoid) return 1.f / (1.f + expf(-x));
  if constexpr (A == Activation::gelu_erf) return 0.5f * x * (1.f + erff(x * kSqrtHalf));
  if constexpr (A == Activation::gelu_tanh)
    return 0.5f * x * (1.f + tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
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
    constexpr bool kFromOutput = A != Activation::gelu_erf && A != Activation::gelu_tanh;
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

}  // namespace

void activation_forward(Activation act, const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  switch (act) {
    case Activation::relu: launch_forward<Activation::relu>(x, y, n, stream); break;
    case Activation::tanh: launch_forward<Activation::tanh>(x, y, n, stream); break;
    case Activation::sigmoid: launch_forward<Activation::sigmoid>(x, y, n, stream); break;
    case Activation::gelu_erf: launch_forward<Activation::gelu_erf>(x, y, n, stream); break;
    case Activation::gelu_tanh: launch_forward<Activation::gelu_tanh>(x, y, n, stream); break;
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
  }
  TANDEM_CUDA_CHECK_LAUNCH("activation_backward");
}

}  // namespace tandem::cuda
