#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/pad_roll.cuh"

namespace tandem::cuda {
namespace {

template <class T>
__global__ void shift_kernel(ShiftGather g, const T* __restrict__ in, T* __restrict__ out) {
  const T fill = static_cast<T>(g.fill_bits);  // the low bytes: an element's bits
  for (int64_t e = global_thread(); e < g.numel; e += grid_threads()) {
    int64_t block = e / g.inner, in_block = 0, in_stride = 1;
    bool outside = false;
    for (int k = g.rank - 1; k >= 0; --k) {
      int64_t j = block % g.sizes[k] - g.offsets[k];
      block /= g.sizes[k];
      if (g.wraps[k]) {
        j %= g.in_sizes[k];
        if (j < 0) j += g.in_sizes[k];
      } else if (j < 0 || j >= g.in_sizes[k]) {
        outside = true;
      }
      in_block += j * in_stride;
      in_stride *= g.in_sizes[k];
    }
    out[e] = outside ? fill : in[in_block * g.inner + e % g.inner];
  }
}

template <class T>
void launch(const ShiftGather& g, const void* in, void* out, cudaStream_t stream) {
  shift_kernel<T><<<grid_for(g.numel), kBlockSize, 0, stream>>>(g, static_cast<const T*>(in), static_cast<T*>(out));
  TANDEM_CUDA_CHECK_LAUNCH("pad/roll");
}

}  // namespace

void shift_gather(const ShiftGather& g, const void* in, void* out, cudaStream_t stream) {
  if (g.numel == 0) return;
  switch (g.elem) {
    case 2: return launch<uint16_t>(g, in, out, stream);
    case 4: return launch<uint32_t>(g, in, out, stream);
    case 8: return launch<uint64_t>(g, in, out, stream);
    default: break;
  }
}

}  // namespace tandem::cuda
