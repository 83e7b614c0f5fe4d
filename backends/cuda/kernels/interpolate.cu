#include "backends/cuda/kernels/interpolate.cuh"
#include "backends/cuda/kernels/launch.cuh"

namespace tandem::cuda {
namespace {

struct Taps3 {
  InterpolateTap d, h, w;
  int64_t image = 0;
};

/// Output element e's image and taps along each of the (up to) three spatial dims.
__device__ inline Taps3 taps_of(const InterpolatePlan& p, int64_t e) {
  Taps3 t;
  const int64_t ow = e % p.dims[2].out, oh = (e / p.dims[2].out) % p.dims[1].out;
  const int64_t od = (e / (p.dims[2].out * p.dims[1].out)) % p.dims[0].out;
  t.image = e / (p.dims[2].out * p.dims[1].out * p.dims[0].out);
  if (p.bilinear) {
    t.d = linear_tap(p.dims[0], od, p.align_corners);
    t.h = linear_tap(p.dims[1], oh, p.align_corners);
    t.w = linear_tap(p.dims[2], ow, p.align_corners);
  } else {
    t.d = nearest_tap(p.dims[0], od);
    t.h = nearest_tap(p.dims[1], oh);
    t.w = nearest_tap(p.dims[2], ow);
  }
  return t;
}

__global__ void forward_kernel(InterpolatePlan p, int64_t numel, const float* __restrict__ x, float* __restrict__ y) {
  const int64_t in_h = p.dims[1].in, in_w = p.dims[2].in, in_plane = p.dims[0].in * in_h * in_w;
  for (int64_t e = global_thread(); e < numel; e += grid_threads()) {
    const Taps3 t = taps_of(p, e);
    const float* src = x + t.image * in_plane;
    if (!p.bilinear) {
      y[e] = src[(t.d.i0 * in_h + t.h.i0) * in_w + t.w.i0];
      continue;
    }
    const float* r0 = src + t.h.i0 * in_w;  // bilinear: one depth (the input is 4-D)
    const float* r1 = src + t.h.i1 * in_w;
    y[e] = (r0[t.w.i0] * t.w.w0 + r0[t.w.i1] * t.w.w1) * t.h.w0 + (r1[t.w.i0] * t.w.w0 + r1[t.w.i1] * t.w.w1) * t.h.w1;
  }
}

__global__ void backward_kernel(InterpolatePlan p, int64_t numel, const float* __restrict__ dy, float* __restrict__ dx) {
  const int64_t in_h = p.dims[1].in, in_w = p.dims[2].in, in_plane = p.dims[0].in * in_h * in_w;
  for (int64_t e = global_thread(); e < numel; e += grid_threads()) {
    const Taps3 t = taps_of(p, e);
    float* src = dx + t.image * in_plane;
    const float g = dy[e];
    if (!p.bilinear) {
      atomicAdd(src + (t.d.i0 * in_h + t.h.i0) * in_w + t.w.i0, g);
      continue;
    }
    float* r0 = src + t.h.i0 * in_w;
    float* r1 = src + t.h.i1 * in_w;
    atomicAdd(r0 + t.w.i0, g * t.h.w0 * t.w.w0);
    atomicAdd(r0 + t.w.i1, g * t.h.w0 * t.w.w1);
    atomicAdd(r1 + t.w.i0, g * t.h.w1 * t.w.w0);
    atomicAdd(r1 + t.w.i1, g * t.h.w1 * t.w.w1);
  }
}

int64_t out_numel(const InterpolatePlan& p) { return p.planes * p.dims[0].out * p.dims[1].out * p.dims[2].out; }

}  // namespace

void interpolate_forward(const InterpolatePlan& p, const float* x, float* y, cudaStream_t stream) {
  const int64_t n = out_numel(p);
  if (n == 0) return;
  forward_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(p, n, x, y);
  TANDEM_CUDA_CHECK_LAUNCH("interpolate");
}

void interpolate_backward(const InterpolatePlan& p, const float* dy, float* dx, cudaStream_t stream) {
  const int64_t in = p.planes * p.dims[0].in * p.dims[1].in * p.dims[2].in, n = out_numel(p);
  if (in > 0) TANDEM_CUDA_CHECK(cudaMemsetAsync(dx, 0, sizeof(float) * static_cast<size_t>(in), stream));
  if (n == 0) return;
  backward_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(p, n, dy, dx);
  TANDEM_CUDA_CHECK_LAUNCH("interpolate backward");
}

}  // namespace tandem::cuda
