#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/shape_ops.cuh"

namespace tandem::cuda {
namespace {

template <class T>
__global__ void permute_kernel(PermuteGather g, const T* __restrict__ in, T* __restrict__ out) {
  for (int64_t e = global_thread(); e < g.numel; e += grid_threads()) {
    int64_t rest = e, offset = 0;
    for (int k = g.rank - 1; k >= 0; --k) {
      offset += (rest % g.sizes[k]) * g.in_strides[k];
      rest /= g.sizes[k];
    }
    out[e] = in[offset];
  }
}

template <class T>
void launch(const PermuteGather& g, const void* in, void* out, cudaStream_t stream) {
  permute_kernel<T><<<grid_for(g.numel), kBlockSize, 0, stream>>>(g, static_cast<const T*>(in), static_cast<T*>(out));
  TANDEM_CUDA_CHECK_LAUNCH("permute");
}

}  // namespace

void permute_gather(const PermuteGather& g, const void* in, void* out, cudaStream_t stream) {
  if (g.numel == 0) return;
  switch (g.elem) {
    case 2: return launch<uint16_t>(g, in, out, stream);
    case 4: return launch<uint32_t>(g, in, out, stream);
    case 8: return launch<uint64_t>(g, in, out, stream);
    default: break;
  }
}

}  // namespace tandem::cuda
