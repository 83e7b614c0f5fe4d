// Dropout with a mask rebuilt from a seed (dropout_mask.h), over the OpenMP threads: the
// dropout layer's forward and backward, and the dropouts inside other layers (between a
// recurrent layer's stacked layers, on attention weights).
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/dropout_mask.h"
#include "backends/cpu/ops/op_util.h"

namespace tandem::cpu {

/// y[i] = x[i] * keep(seed, i) / (1 - p) over n elements (y may be x); p == 1 gives zeros.
inline void apply_dropout(const float* x, float* y, int64_t n, uint64_t seed, float p) {
  if (p >= 1.f) {
    std::memset(y, 0, sizeof(float) * static_cast<size_t>(n));
    return;
  }
  const float scale = dropout_scale(p);
  parallel_for(n, 8, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) y[i] = dropout_keep(seed, static_cast<uint64_t>(i), p) ? x[i] * scale : 0.f;
  });
}

}  // namespace tandem::cpu
