// The layout moves and masks of multi_head_attention on a GPU (backends/cuda/ops/attention.cpp);
// its products are cuBLAS GEMMs and its softmax softmax.cuh's.
//
// A projection is [rows, E] in its input's row order: row l * N + n (sequence first) or
// n * X + l (batch_first) for position l of batch entry n. The heads are [N, H, X, D]
// (E = H D), so that every head's [X, D] block is contiguous and a strided batched GEMM
// over the N H blocks multiplies them all.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

struct HeadsShape {
  int64_t batch = 1;   // N
  int64_t length = 1;  // X: L for the query, S for keys and values
  int64_t heads = 1;   // H
  int64_t dim = 1;     // D
  bool batch_first = false;
};

/// heads [N, H, X, D] = the projection rows [rows, H D], per head.
void split_heads(const HeadsShape& shape, const float* rows, float* heads, cudaStream_t stream);
/// rows [rows, H D] = heads [N, H, X, D]: split_heads undone.
void merge_heads(const HeadsShape& shape, const float* heads, float* rows, cudaStream_t stream);

/// The masks over scores [N, H, L, S], as the CPU kernel applies them: a float attn_mask
/// is added, an int64 one sets -inf where nonzero (either [L, S], or [N H, L, S] with
/// `per_head`); then -inf where key_padding_mask [N, S] is nonzero, and where s > l when
/// `causal`. Null pointers: no such mask.
struct AttentionMasks {
  const float* float_mask = nullptr;
  const int64_t* int_mask = nullptr;
  bool per_head = false;
  const int64_t* key_padding = nullptr;
  bool causal = false;
};
void apply_attention_masks(const AttentionMasks& masks, int64_t n, int64_t h, int64_t l, int64_t s, float* scores,
                           cudaStream_t stream);

/// The gradient of a float [L, S] attn_mask: d_scores [N H, L, S] summed over N H
/// (assigned). A [N H, L, S] mask's gradient is d_scores itself: a copy.
void attention_mask_grad_shared(const float* d_scores, int64_t nh, int64_t ls, float* d_mask, cudaStream_t stream);

}  // namespace tandem::cuda
