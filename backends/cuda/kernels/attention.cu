#include <cmath>

#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/kernels/launch.cuh"

namespace tandem::cuda {
namespace {

/// The element of the projection rows that head element i ([N, H, X, D] order) is.
__device__ inline int64_t row_element(const HeadsShape& s, int64_t i) {
  const int64_t d = i % s.dim;
  int64_t rest = i / s.dim;
  const int64_t x = rest % s.length;
  rest /= s.length;
  const int64_t h = rest % s.heads;
  const int64_t n = rest / s.heads;
  const int64_t row = s.batch_first ? n * s.length + x : x * s.batch + n;
  return row * (s.heads * s.dim) + h * s.dim + d;
}

__global__ void split_kernel(HeadsShape s, const float* __restrict__ rows, float* __restrict__ heads, int64_t total) {
  for (int64_t i = global_thread(); i < total; i += grid_threads()) heads[i] = rows[row_element(s, i)];
}

__global__ void merge_kernel(HeadsShape s, const float* __restrict__ heads, float* __restrict__ rows, int64_t total) {
  for (int64_t i = global_thread(); i < total; i += grid_threads()) rows[row_element(s, i)] = heads[i];
}

__global__ void masks_kernel(AttentionMasks m, int64_t n, int64_t h, int64_t l, int64_t s, float* scores) {
  const int64_t total = n * h * l * s;
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t col = i % s, row = (i / s) % l, nh = i / (l * s), batch = nh / h;
    const int64_t m_at = ((m.per_head ? nh * l : 0) + row) * s + col;
    float v = scores[i];
    if (m.float_mask) v += m.float_mask[m_at];
    if (m.int_mask && m.int_mask[m_at] != 0) v = -INFINITY;
    if (m.key_padding && m.key_padding[batch * s + col] != 0) v = -INFINITY;
    if (m.causal && col > row) v = -INFINITY;
    scores[i] = v;
  }
}

__global__ void mask_grad_kernel(const float* __restrict__ d_scores, int64_t nh, int64_t ls, float* __restrict__ d_mask) {
  for (int64_t i = global_thread(); i < ls; i += grid_threads()) {
    float sum = 0.f;  // in the CPU's order: nh ascending
    for (int64_t k = 0; k < nh; ++k) sum += d_scores[k * ls + i];
    d_mask[i] = sum;
  }
}

}  // namespace

void split_heads(const HeadsShape& shape, const float* rows, float* heads, cudaStream_t stream) {
  const int64_t total = shape.batch * shape.heads * shape.length * shape.dim;
  if (total == 0) return;
  split_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(shape, rows, heads, total);
  TANDEM_CUDA_CHECK_LAUNCH("split_heads");
}

void merge_heads(const HeadsShape& shape, const float* heads, float* rows, cudaStream_t stream) {
  const int64_t total = shape.batch * shape.heads * shape.length * shape.dim;
  if (total == 0) return;
  merge_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(shape, heads, rows, total);
  TANDEM_CUDA_CHECK_LAUNCH("merge_heads");
}

void apply_attention_masks(const AttentionMasks& masks, int64_t n, int64_t h, int64_t l, int64_t s, float* scores,
                           cudaStream_t stream) {
  const int64_t total = n * h * l * s;
  if (total == 0 || (!masks.float_mask && !masks.int_mask && !masks.key_padding && !masks.causal)) return;
  masks_kernel<<<grid_for(total), kBlockSize, 0, stream>>>(masks, n, h, l, s, scores);
  TANDEM_CUDA_CHECK_LAUNCH("attention masks");
}

void attention_mask_grad_shared(const float* d_scores, int64_t nh, int64_t ls, float* d_mask, cudaStream_t stream) {
  if (ls == 0) return;
  mask_grad_kernel<<<grid_for(ls), kBlockSize, 0, stream>>>(d_scores, nh, ls, d_mask);
  TANDEM_CUDA_CHECK_LAUNCH("attention mask gradient");
}

}  // namespace tandem::cuda
