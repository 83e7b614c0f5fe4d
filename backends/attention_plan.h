// multi_head_attention's shapes and options, shared by the CPU and CUDA kernels
// (backends/cpu/ops/attention.cpp has the op's semantics): query [L, N, E] ([N, L, E] with
// batch_first), key and value [S, N, E] (absent in self-attention), then the masks the
// `masks` attribute names, key_padding_mask before attn_mask. The loader has checked them
// against the layer's attributes.
#pragma once

#include <cstdint>

#include "backends/kernel.h"

namespace tandem {

struct AttentionPlan {
  int64_t e = 0, heads = 1, d = 0;  // embed_dim, num_heads, E / H
  int64_t n = 0, l = 0, s = 0;      // batch, query length, key length
  int64_t qkv = 3;                  // 1: self-attention (query alone), else query, key, value
  int64_t key_padding_slot = -1;    // input index of key_padding_mask, -1 without
  int64_t mask_slot = -1;           // input index of attn_mask, -1 without
  bool mask_float = false;          // attn_mask float32 (added), else int64 (nonzero masks)
  bool mask_per_head = false;       // attn_mask [N H, L, S], else [L, S]
  bool has_bias = true, batch_first = false, causal = false;
  double dropout = 0;               // of the attention weights, in training
};

AttentionPlan plan_attention(const KernelSpec& spec);

}  // namespace tandem
